"""``gpusteward slurm ...``: what gpusteward sees of a Slurm cluster, and its time-limit advice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gpusteward.cli import output
from gpusteward.cli.exits import err, exit_on_errors
from gpusteward.integrations.slurm.build import slurm_advice, slurm_jobs
from gpusteward.runtime.config import load_settings

slurm_app = typer.Typer(help="Look at a Slurm cluster the way the slurm source does.", no_args_is_help=True)

out = output.console()

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="Config file (YAML); source.slurm is read.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]


def _problems(problems: list[str]) -> None:
    for p in problems[:20]:
        err.print(f"[yellow]warning:[/yellow] {p}", highlight=False)


@slurm_app.command("jobs")
def jobs(config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """Running GPU jobs: owner and contact, partition, GPUs by node and index, protection."""
    with exit_on_errors():
        rows, problems = slurm_jobs(load_settings(config).source.slurm)
    if json_out:
        data = [
            {
                "id": r.workload.id,
                "job_id": r.workload.ref.get("job_id"),
                "name": r.workload.name,
                "user": r.workload.owner.user,
                "account": r.workload.owner.team,
                "contact": r.workload.owner.contact,
                "partition": r.workload.ref.get("partition"),
                "qos": r.workload.ref.get("qos"),
                "started_at": r.workload.started_at.isoformat(),
                "gpus": list(r.gpus),
                "protected": r.protected or None,
            }
            for r in rows
        ]
        print(json.dumps({"jobs": data, "problems": problems}, indent=2))
        return
    table = Table("workload", "user", "account", "partition", "GPUs", "protected")
    for r in rows:
        who = r.workload.owner.user + (f" <{r.workload.owner.contact}>" if r.workload.owner.contact else "")
        table.add_row(
            r.workload.id,
            who,
            r.workload.owner.team,
            r.workload.ref.get("partition", ""),
            " ".join(r.gpus),
            r.protected,
        )
    out.print(table)
    _problems(problems)


@slurm_app.command("advice")
def advice(config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """Running jobs whose time limit is far above their owner's usual runtime (from sacct)."""
    from datetime import UTC, datetime

    with exit_on_errors():
        findings, problems = slurm_advice(load_settings(config).source.slurm, datetime.now(tz=UTC))
    if json_out:
        data = [{"workload": f.workload_id, "rule": f.rule, "message": f.message} for f in findings]
        print(json.dumps({"advice": data, "problems": problems}, indent=2))
        return
    if not findings:
        out.print("no time-limit advice")
    for f in findings:
        out.print(f"{f.workload_id}: {f.message}", highlight=False)
    _problems(problems)
