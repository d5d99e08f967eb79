"""The reading pages: the overview with its charts, findings, a workload, actions and audit."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from gpusteward.domain.models import Metric
from gpusteward.report.charts import bar_chart, hbar_chart
from gpusteward.report.line_chart import line_chart
from gpusteward.web import data, overview_data
from gpusteward.web.context import WebContext
from gpusteward.web.filters import (
    ActionQuery,
    AuditQuery,
    FindingQuery,
    action_query,
    audit_query,
    finding_query,
)
from gpusteward.web.pages.base import ctx_of, message, pager, render, svg, who
from gpusteward.web.read_cache import reads_of

router = APIRouter(include_in_schema=False)


def _overview_values(ctx: WebContext) -> dict[str, Any]:
    cost = ctx.settings.cost
    ov = overview_data.for_context(ctx)
    util = ov["utilisation"]
    eff = ov["efficiency_per_day"]
    days = [d["day"][5:] for d in ov["waste_cost_per_day"]]
    charts = {
        "utilisation": line_chart(
            [u["at"] for u in util],
            {"cluster mean": [u["pct"] for u in util]},
            title="GPU utilisation, last window (%)",
            unit="%",
            y_max=100,
        ),
        "money": bar_chart(
            days,
            {
                "waste": [d["cost"] for d in ov["waste_cost_per_day"]],
                "saved": [d["cost"] for d in ov["saved_cost_per_day"]],
            },
            title=f"Waste and savings per day ({cost.currency})",
            unit=cost.currency,
        ),
        "efficiency": line_chart(
            [d["day"][5:] for d in eff],
            {"busy share of held GPU-hours": [d["pct"] for d in eff]},
            title="GPU efficiency per day (%)",
            unit="%",
            y_max=100,
        ),
        "actions": bar_chart(
            ov["actions_24h_by_hour"]["hours"],
            ov["actions_24h_by_hour"]["levels"],
            title="Actions in the last 24 h, per hour and level",
        ),
    }
    return {"ov": ov, "charts": {k: svg(v) for k, v in charts.items()}}


@router.get("/")
def overview(request: Request) -> Response:
    caller = who(request)
    return render(request, caller, "overview.html.j2", **_overview_values(ctx_of(request)))


@router.get("/partials/overview")
def overview_partial(request: Request) -> Response:
    caller = who(request)
    return render(request, caller, "_overview_body.html.j2", **_overview_values(ctx_of(request)))


@router.get("/findings")
def findings(request: Request, query: Annotated[FindingQuery, Depends(finding_query)]) -> Response:
    caller = who(request)
    ctx = ctx_of(request)
    gpus = ctx.gpus()
    reads = reads_of(request)
    listing = data.findings(ctx.store, gpus, query, reads)
    return render(
        request,
        caller,
        "findings.html.j2",
        rows=listing.rows,
        facets=data.facets(ctx.store, gpus, status=query.status, reads=reads),
        filters=query.filters(),
        pager=pager(request, listing.next_before),
    )


@router.get("/workloads/{workload_id:path}")
def workload(request: Request, workload_id: str, note: str = "") -> Response:
    caller = who(request)
    ctx = ctx_of(request)
    found = data.workload(ctx.store, workload_id, ctx.gpus())
    if found is None:
        return message(request, caller, 404, "Not found", f"No workload {workload_id!r}.")
    steward = ctx.steward()
    uuids = found["workload"].get("gpu_uuids") or (
        found["findings"][0]["gpu_uuids"] if found["findings"] else []
    )
    charts = []
    for metric, title, unit, top in (
        (Metric.GPU_UTIL, "GPU utilisation (%)", "%", 100.0),
        (Metric.MEM_USED, "GPU memory used (MiB)", "MiB", None),
    ):
        labels, series = overview_data.gpu_series(steward, uuids, metric, ctx.now())
        if labels:
            charts.append(svg(line_chart(labels, series, title=title, unit=unit, y_max=top)))
    for f in found["findings"][:1]:
        for expr, per_gpu in f["evidence"].items():
            names = [data.gpu_name(ctx.gpus(), u) for u in per_gpu]
            values = [float(v) if v is not None else 0.0 for v in per_gpu.values()]
            charts.append(svg(hbar_chart(names, values, title=f"Evidence: {expr}")))
    return render(
        request,
        caller,
        "workload.html.j2",
        w=found,
        charts=charts,
        note=note,
        max_snooze=ctx.settings.policy.snooze.max_hours,
        appeal_hours=ctx.settings.policy.rollout.false_kill_horizon_hours,
        wid_q=quote(workload_id, safe="/:"),
    )


@router.get("/actions")
def actions(request: Request, query: Annotated[ActionQuery, Depends(action_query)]) -> Response:
    caller = who(request)
    listing = data.actions(ctx_of(request).store, query, reads_of(request))
    values: dict[str, Any] = {**query.filters(), "query": urlencode(query.filters())}
    return render(
        request,
        caller,
        "actions.html.j2",
        rows=listing.rows,
        pager=pager(request, listing.next_before),
        **values,
    )


@router.get("/audit")
def audit(request: Request, query: Annotated[AuditQuery, Depends(audit_query)]) -> Response:
    caller = who(request)
    listing = data.audit(ctx_of(request).store, query, reads_of(request))
    values: dict[str, Any] = {**query.filters(), "query": urlencode(query.filters())}
    return render(
        request,
        caller,
        "audit.html.j2",
        rows=listing.rows,
        pager=pager(request, listing.next_before),
        **values,
    )
