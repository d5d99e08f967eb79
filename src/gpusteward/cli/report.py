"""``gpusteward report``: the waste ledger of a period as HTML, for the cluster and each team."""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path
from typing import Annotated, cast, get_args

import typer

from gpusteward.cli import output
from gpusteward.cli.exits import exit_on_errors, fail
from gpusteward.report import Period, write_reports
from gpusteward.runtime.config import load_settings
from gpusteward.store.db import StateStore

out = output.console()


def db_url(value: str) -> str:
    """A SQLAlchemy URL as given, or a SQLite file path made into one."""
    return value if "://" in value else f"sqlite:///{Path(value).resolve()}"


def report(
    out_dir: Annotated[
        Path, typer.Option("--out", "-o", help="Folder to write index.html and team-*.html into.")
    ],
    period: Annotated[str, typer.Option(help="day, week or month (30 days).")] = "week",
    end: Annotated[
        str | None,
        typer.Option("--end", help="Last day of the period, YYYY-MM-DD (default: the ledger's newest day)."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Config file: the state database, currency and rate."),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="State database to read instead of store.url: a SQLAlchemy URL or a SQLite file "
            "(e.g. from `backtest --state`).",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the files written as JSON.")] = False,
) -> None:
    """Write an HTML waste report: money wasted and saved per day, top wasters, waste by kind,
    GPU efficiency, actions, right-size advice per owner and the consolidation plan in force, with
    inline SVG charts; one page for the cluster and one per team. (No PDF: print the page from a
    browser if you need one.)"""
    with exit_on_errors():
        if period not in get_args(Period):
            fail(f"--period must be one of {', '.join(get_args(Period))}, not {period!r}")
        last = None
        if end is not None:
            try:
                last = date.fromisoformat(end)
            except ValueError:
                fail(f"--end: not a date (YYYY-MM-DD): {end!r}")
        settings = load_settings(config)
        store = StateStore(db_url(db) if db else settings.store.url)
        try:
            store.create_schema()
            written = write_reports(
                store,
                out_dir,
                period=cast(Period, period),
                end=None if last is None else last + timedelta(days=1),
                currency=settings.cost.currency,
                rate=settings.cost.rate,
                consolidation=settings.consolidation,
                policy=settings.policy,
                prices=settings.cost,
            )
        finally:
            store.close()
    if json_out:
        figures = {k: v for w in written for k, v in w.figures.items()}
        print(json.dumps({"files": {w.scope: str(w.path) for w in written}, **figures}, indent=2))
        return
    for w in written:
        out.print(f"{w.scope}: {w.path}", highlight=False)
