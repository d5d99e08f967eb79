"""``gpusteward backtest --sweep FILE``: the frontier of a parameter grid as a table, JSON or SVG."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpusteward.cli.exits import err
from gpusteward.integrations.replay import Trace
from gpusteward.report.frontier_chart import frontier_chart
from gpusteward.runtime.config import Settings
from gpusteward.scenarios.scoring import Scoring
from gpusteward.scenarios.sweep import Plan, Point, load_spec, run_sweep
from gpusteward.store.files import write_text


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def plan_line(plan: Plan) -> str:
    """What the sweep will do, said before it starts (on stderr: --json keeps stdout clean)."""
    minutes = plan.estimate_s / 60
    took = f"about {minutes:,.0f} min" if minutes >= 1.5 else f"about {plan.estimate_s:,.0f} s"
    return (
        f"sweep: {plan.points} points on {plan.processes} process{'es' if plan.processes > 1 else ''}, "
        f"{took} (timed on the first {plan.timed_share:.0%} of the trace)"
    )


def print_frontier(console: Console, points: Sequence[Point], trace: str, rule: str) -> None:
    table = Table(title=f"sweep over {trace} (false kill: {rule}); * on the frontier")
    table.add_column("")
    table.add_column("point")
    for col in ("stops", "false kills", "reclaimed GPU-h"):
        table.add_column(col, justify="right")
    for p in points:
        table.add_row(
            "*" if p.frontier else "", p.name, str(p.stops), str(p.regrets), f"{p.reclaimed_gpu_hours:,.1f}"
        )
    console.print(table)


def sweep_command(
    console: Console,
    history: Trace,
    settings: Settings,
    sweep: Path,
    *,
    jobs: int | None,
    scoring: Scoring,
    tick_s: float | None,
    json_out: bool,
    svg: Path | None,
) -> None:
    spec = load_spec(sweep)
    progress = Progress(
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=json_out,
        transient=True,
    )
    with progress:
        task = progress.add_task("sweep", total=None)
        points = run_sweep(
            history,
            settings,
            spec,
            jobs=jobs or default_jobs(),
            scoring=scoring,
            tick_s=tick_s,
            on_done=lambda done, total: progress.update(task, completed=done, total=total),
            on_plan=lambda plan: err.print(plan_line(plan), highlight=False),
        )
    if svg is not None:
        chart = frontier_chart(
            [(p.name, p.reclaimed_gpu_hours, p.regrets, p.frontier) for p in points],
            title=f"false kills against reclaimed GPU-hours: {history.name}",
        )
        write_text(svg, chart + "\n")
        err.print(f"chart written to {svg}", highlight=False)
    if json_out:
        obj = {
            "trace": history.name,
            "regret_rule": scoring.describe(),
            "points": [p.to_dict() for p in points],
        }
        print(json.dumps(obj, indent=2))
        return
    print_frontier(console, points, history.name, scoring.describe())
