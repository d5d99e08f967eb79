"""``gpusteward showback``: what each team and owner held, used, wasted and had reclaimed in a
month, and what it cost; ``close`` freezes a month for finance; ``budgets`` compares the month
with each team's budget."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gpusteward.analysis import budgets as budget_figures
from gpusteward.analysis.focus import COLUMNS, csv_value, focus_rows
from gpusteward.analysis.showback import (
    month_of_time,
    month_range,
    read_month,
    showback_doc,
    team_label,
    team_totals,
)
from gpusteward.cli import output
from gpusteward.cli.exits import exit_on_errors, fail
from gpusteward.cli.state import ConfigOpt, JsonOpt, open_store, print_json
from gpusteward.cli.views import utcnow
from gpusteward.domain.records import ShowbackRow

showback_app = typer.Typer(
    help=(
        "Showback per team and owner: GPU-hours held, used (utilisation-weighted), wasted and "
        "reclaimed, and the spend at the cost model's rates (cost.rate, per GPU model) plus "
        "measured power (cost.electricity_per_kwh).\n\n"
        "Examples:\n\n"
        "  gpusteward showback --month 2026-11                 a table per team\n\n"
        "  gpusteward showback --month 2026-11 --format focus -o nov.csv   FOCUS 1.1 for finance\n\n"
        "  gpusteward showback close --month 2026-11           freeze November\n\n"
        "  gpusteward showback budgets                         this month against the budgets"
    ),
    invoke_without_command=True,
)
out = output.console()

MonthOpt = Annotated[
    str | None, typer.Option("--month", "-m", help="The month, YYYY-MM (default: the current month, UTC).")
]


def _month(month: str | None) -> str:
    chosen = month or month_of_time(utcnow())
    try:
        month_range(chosen)
    except ValueError as e:
        fail(str(e), 2)
    return chosen


def _csv(header: tuple[str, ...] | list[str], rows: list[list[str]]) -> str:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return text.getvalue()


@showback_app.callback()
def showback(
    ctx: typer.Context,
    month: MonthOpt = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="table (per team), csv or json (per day, team, owner, GPU model and rate: the "
            "/api/v1/showback rows), focus (FinOps FOCUS 1.1 CSV, one row per team x GPU model x day).",
        ),
    ] = "table",
    team: Annotated[str | None, typer.Option("--team", help="Only this team.")] = None,
    output_file: Annotated[
        Path | None, typer.Option("--output", "-o", help="File to write (default: stdout).")
    ] = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """A month's showback (see the examples above)."""
    if ctx.invoked_subcommand is not None:
        return
    if fmt not in ("table", "csv", "json", "focus"):
        fail(f"--format {fmt!r}: choose table, csv, json or focus", 2)
    chosen = _month(month)
    with exit_on_errors():
        settings, store = open_store(config)
        rows, closed = read_month(store.ledger, chosen, team=team)
    fmt = "json" if json_out else fmt
    prices = settings.cost
    if fmt == "table":
        _table(chosen, closed, prices.currency, rows)
        return
    if fmt == "json":
        text = json.dumps(showback_doc(chosen, closed, prices.currency, rows), indent=2) + "\n"
    elif fmt == "csv":
        doc = showback_doc(chosen, closed, prices.currency, rows)
        header = list(doc["rows"][0]) if doc["rows"] else ["day", "team", "user", "gpu_model", "rate"]
        text = _csv(header, [[csv_value(r[c]) for c in header] for r in doc["rows"]])
    else:
        focus = focus_rows(rows, chosen, settings.showback, prices)
        text = _csv(COLUMNS, [[csv_value(r.get(c)) for c in COLUMNS] for r in focus])
    if output_file is None:
        typer.echo(text, nl=False)
    else:
        output_file.write_text(text, encoding="utf-8")
        out.print(f"wrote {output_file} ({chosen}{', closed' if closed else ''})")


def _table(month: str, closed: bool, currency: str, rows: list[ShowbackRow]) -> None:
    table = Table(title=f"Showback {month}{' (closed)' if closed else ''}, {currency}")
    for col in ("team", "owners", "held GPU-h", "used GPU-h", "used %", "wasted GPU-h", "reclaimed GPU-h",
                "spend", "power", "total"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("team", "owners") else "right")
    for t in team_totals(rows):
        a = t.amounts
        share = t.used_share
        table.add_row(
            team_label(t.team), str(len(t.users)), f"{a.held_gpu_hours:,.1f}", f"{a.used_gpu_hours:,.1f}",
            "-" if share is None else f"{share:.0%}", f"{a.wasted_gpu_hours:,.1f}",
            f"{a.reclaimed_gpu_hours:,.1f}", f"{a.spend:,.2f}", f"{a.power_cost:,.2f}", f"{t.cost:,.2f}",
        )  # fmt: skip
    out.print(table)


@showback_app.command("close")
def close(
    month: Annotated[
        str, typer.Option("--month", "-m", help="The month to close, YYYY-MM; it must have ended.")
    ],
    config: ConfigOpt = None,
) -> None:
    """Freeze a month: its rows are final, and amounts that arrive later count on the day they
    arrive. The agent closes a month by itself showback.close_after_days after it ends."""
    chosen = _month(month)
    with exit_on_errors():
        _, store = open_store(config)
        try:
            done = store.ledger.close_month(chosen, utcnow())
        except ValueError as e:
            fail(str(e), 2)
    out.print(f"{chosen} closed" if done else f"{chosen} was closed already")


@showback_app.command("budgets")
def budgets(month: MonthOpt = None, config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """Each team's budget (budgets.teams): spent so far, the share, and the burn-rate forecast."""
    chosen = _month(month)
    with exit_on_errors():
        settings, store = open_store(config)
        rows, _ = read_month(store.ledger, chosen)
    totals = {t.team: t for t in team_totals(rows)}
    now = utcnow()
    found = [
        budget_figures.status(team, budget, chosen, totals.get(team), now)
        for team, budget in sorted(settings.budgets.teams.items())
    ]
    if json_out:
        print_json([
            {"team": s.team, "month": s.month, "unit": s.unit, "budget": s.budget, "spent": s.spent,
             "share": s.share, "burn_per_day": s.burn_per_day, "forecast": s.forecast,
             "runout_day": s.runout_day.isoformat() if s.runout_day else None}
            for s in found
        ])  # fmt: skip
        return
    if not found:
        out.print("no budgets configured (budgets.teams in the config)")
        return
    table = Table(title=f"Budgets {chosen}")
    for col in ("team", "budget", "spent", "share", "per day", "forecast", "runs out"):
        table.add_column(col)
    for s in found:
        unit = settings.cost.currency if s.unit == "money" else "GPU-h"
        table.add_row(
            s.team, f"{s.budget:,.0f} {unit}", f"{s.spent:,.2f}", f"{s.share:.0%}", f"{s.burn_per_day:,.2f}",
            f"{s.forecast:,.0f}", s.runout_day.isoformat() if s.runout_day else "lasts the month",
        )  # fmt: skip
    out.print(table)
