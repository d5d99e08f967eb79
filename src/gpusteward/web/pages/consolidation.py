"""The consolidation page: the live plan (which light services share a GPU), GPUs now and after
by team as a chart, and the moves made. Read-only: moves go through the tick and its approvals."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from gpusteward.report.consolidation import team_chart
from gpusteward.web.pages.base import ctx_of, render, svg, who

router = APIRouter(include_in_schema=False)


def plan_values(request: Request) -> dict[str, Any]:
    ctx = ctx_of(request)
    steward = ctx.steward()
    step = steward.consolidation if steward is not None else None
    plan = step.summary() if step is not None else None
    chart = team_chart(plan["by_team"], plan["gpus_before"], plan["gpus_after"]) if plan else ""
    return {
        "enabled": ctx.settings.consolidation.enabled,
        "resource": ctx.settings.consolidation.resource,
        "covered_hours": round(step.covered_hours(ctx.now()), 1) if step is not None else 0.0,
        "min_history_hours": ctx.settings.consolidation.min_history_hours,
        "plan": plan,
        "chart": svg(chart) if chart else "",
    }


@router.get("/consolidation")
def consolidation(request: Request) -> Response:
    caller = who(request)
    return render(request, caller, "consolidation.html.j2", **plan_values(request))
