"""``gpusteward init``: find what this machine reaches, write a dry-run config for it, scan once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gpusteward.cli import logsetup, output, views
from gpusteward.cli.detect import detect
from gpusteward.cli.exits import exit_on_errors, fail
from gpusteward.cli.init_config import render
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings

out = output.console()
SOURCES = ("sim", "nvml", "prometheus", "slurm", "kubernetes")


def init(
    path: Annotated[Path, typer.Option("--path", "-p", help="Where to write the config.")] = Path(
        "gpusteward.yaml"
    ),
    prometheus: Annotated[
        str | None,
        typer.Option(help="Prometheus base URL (default: http://localhost:9090 when it answers /-/ready)."),
    ] = None,
    source: Annotated[
        str | None, typer.Option("--source", "-s", help=f"Use this source, not the detected one: {SOURCES}.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Write without asking (for scripts).")] = False,
    scan: Annotated[bool, typer.Option(help="Run one dry-run scan with the new config.")] = True,
) -> None:
    """Detect what this machine can reach (an NVIDIA driver, Slurm's `squeue`, a kubeconfig or
    in-cluster service account, Prometheus), write a commented config in dry-run for the matching
    source, then run `scan` once and show what it would do.

    Never overwrites a file without --force.
    """
    if source is not None and source not in SOURCES:
        fail(f"--source must be one of {', '.join(SOURCES)}, not {source!r}")
    if path.exists() and not force:
        fail(f"{path} exists: not overwritten (use --force, or --path for another file)")
    found = detect(prometheus)
    chosen = source or found.source()
    text = render(found, chosen)
    for note in found.notes:
        out.print(f"  {note}", highlight=False)
    out.print(f"source: [bold]{chosen}[/]; config for {path}:\n", highlight=False)
    out.print(text, markup=False, highlight=False)
    if not yes:
        if not sys.stdin.isatty():
            fail("not asking on a non-interactive input: add --yes to write the config")
        typer.confirm(f"Write it to {path}?", default=True, abort=True)
    with exit_on_errors():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        settings = load_settings(path, mode="dry-run")  # what was written must load
    out.print(f"wrote {path}", highlight=False)
    if not scan:
        return
    with exit_on_errors():
        logsetup.apply(settings)
        steward, _ = build_steward(settings)
        report = steward.tick()
    views.print_scan(out, report, steward.gpus)
    if not report.source_ok:
        fail(f"the {chosen} source did not answer: fix its section in {path}, then `gpusteward scan`", 1)
    out.print(f"next: `gpusteward scan -c {path}` any time, `gpusteward run -c {path}` to keep watching.")
