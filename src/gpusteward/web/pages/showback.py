"""The Showback page: a month per team (GPU-hours held, used, wasted, reclaimed; spend and power),
the daily cost stacked by team, each team's GPU-hours stacked into used and idle, the budgets with
their burn-rate forecast, and the exports for finance (``/api/v1/showback/export``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from gpusteward.analysis.showback import (
    daily_cost_by_team,
    month_days,
    previous_month,
    read_month,
    team_label,
    team_totals,
)
from gpusteward.domain.records import next_month
from gpusteward.report.charts import stacked_bar_chart
from gpusteward.web.pages.base import ctx_of, render, svg, who
from gpusteward.web.showback_api import MonthQuery, budget_rows, chosen_month

router = APIRouter(include_in_schema=False)


@router.get("/showback")
def showback(request: Request, month: MonthQuery = None) -> Response:
    caller = who(request)
    ctx = ctx_of(request)
    chosen = chosen_month(ctx, month)
    rows, closed = read_month(ctx.store.ledger, chosen)
    currency = ctx.settings.cost.currency
    teams = team_totals(rows)
    names = [team_label(t.team) for t in teams]
    by_day = daily_cost_by_team(rows)
    days = month_days(chosen)
    daily = stacked_bar_chart(
        [d[8:] for d in days],
        {team_label(t.team): [by_day.get(d, {}).get(t.team, 0.0) for d in days] for t in teams},
        title=f"Cost per day by team, {chosen}",
        unit=currency,
    )
    hours = stacked_bar_chart(
        names,
        {
            "used": [t.amounts.used_gpu_hours for t in teams],
            "held, idle": [max(0.0, t.amounts.held_gpu_hours - t.amounts.used_gpu_hours) for t in teams],
        },
        title="GPU-hours per team: used and idle",
        unit="GPU-h",
    )
    return render(
        request,
        caller,
        "showback.html.j2",
        month=chosen,
        closed=closed,
        previous=previous_month(chosen),
        following=next_month(chosen),
        teams=teams,
        budgets=budget_rows(ctx, chosen, {t.team: t for t in teams}),
        charts={"daily": svg(daily), "hours": svg(hours)},
        close_after_days=ctx.settings.showback.close_after_days,
    )
