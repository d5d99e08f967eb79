"""Showback under ``/api/v1``: a month's rows per day, team, owner, GPU model and rate (the same
as ``gpusteward showback --format json``; the hub pulls this shape), and the month's exports for
finance (CSV rows, FOCUS 1.1) as files. Viewers may read them."""

from __future__ import annotations

import csv
import io
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from gpusteward.analysis import budgets as budget_figures
from gpusteward.analysis.focus import COLUMNS, csv_value, focus_rows
from gpusteward.analysis.showback import month_of_time, read_month, showback_doc, team_totals
from gpusteward.web.api import caller, ctx_of
from gpusteward.web.context import WebContext
from gpusteward.web.data import json_response

router = APIRouter(prefix="/api/v1", tags=["gpusteward"])

#: A month as YYYY-MM; unset: the current month (UTC).
MonthQuery = Annotated[
    str | None,
    Query(pattern=r"^\d{4}-(0[1-9]|1[0-2])$", description="The month, YYYY-MM (default: this month)."),
]


def chosen_month(ctx: WebContext, month: str | None) -> str:
    return month or month_of_time(ctx.now())


def budget_rows(ctx: WebContext, month: str, totals: dict[str, Any]) -> list[dict[str, Any]]:
    """Each configured team budget against the month: spent, share, burn rate, run-out day."""
    out = []
    for team, budget in sorted(ctx.settings.budgets.teams.items()):
        s = budget_figures.status(team, budget, month, totals.get(team), ctx.now())
        out.append(
            {
                "team": team,
                "unit": s.unit,
                "budget": s.budget,
                "spent": s.spent,
                "share": s.share,
                "burn_per_day": s.burn_per_day,
                "forecast": s.forecast,
                "runout_day": s.runout_day.isoformat() if s.runout_day else None,
            }
        )
    return out


@router.get("/showback", summary="A month's showback rows per day, team, owner, GPU model and rate")
def showback(request: Request, month: MonthQuery = None) -> Response:
    caller(request)
    ctx = ctx_of(request)
    chosen = chosen_month(ctx, month)
    rows, closed = read_month(ctx.store.ledger, chosen)
    return json_response(showback_doc(chosen, closed, ctx.settings.cost.currency, rows))


@router.get("/showback/budgets", summary="Each team's budget against the month, with the burn-rate forecast")
def budgets(request: Request, month: MonthQuery = None) -> Response:
    caller(request)
    ctx = ctx_of(request)
    chosen = chosen_month(ctx, month)
    rows, _ = read_month(ctx.store.ledger, chosen)
    return json_response(budget_rows(ctx, chosen, {t.team: t for t in team_totals(rows)}))


@router.get("/showback/export", summary="The month as a CSV file: its rows, or FOCUS 1.1 for finance")
def export(
    request: Request,
    month: MonthQuery = None,
    format: Annotated[
        Literal["csv", "focus"], Query(description="csv: the rows; focus: FOCUS 1.1.")
    ] = "focus",
) -> Response:
    caller(request)
    ctx = ctx_of(request)
    chosen = chosen_month(ctx, month)
    rows, closed = read_month(ctx.store.ledger, chosen)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    if format == "focus":
        writer.writerow(COLUMNS)
        for r in focus_rows(rows, chosen, ctx.settings.showback, ctx.settings.cost):
            writer.writerow([csv_value(r.get(c)) for c in COLUMNS])
    else:
        doc = showback_doc(chosen, closed, ctx.settings.cost.currency, rows)
        header = ["day", "team", "user", "gpu_model", "rate", "held_gpu_hours", "used_gpu_hours",
                  "wasted_gpu_hours", "reclaimed_gpu_hours", "spend", "power_cost"]  # fmt: skip
        writer.writerow(header)
        writer.writerows([[csv_value(r[c]) for c in header] for r in doc["rows"]])
    name = f"showback-{chosen}{'-focus' if format == 'focus' else ''}.csv"
    return Response(
        text.getvalue(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )
