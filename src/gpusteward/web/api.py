"""The JSON API under ``/api/v1``: the data of every page, and the controls (approve, reject,
snooze, pause, resume, rule preview). Bearer tokens or the page session (with CSRF)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from gpusteward.domain.errors import ControlError, RuleError
from gpusteward.store.access import Role
from gpusteward.web import data, overview_data, rollout_data, rule_data
from gpusteward.web.auth import Principal
from gpusteward.web.context import WebContext
from gpusteward.web.filters import (
    ActionQuery,
    ApprovalId,
    ApprovalQuery,
    AuditQuery,
    FindingQuery,
    action_query,
    approval_query,
    audit_query,
    finding_query,
)
from gpusteward.web.read_cache import reads_of

router = APIRouter(prefix="/api/v1", tags=["gpusteward"])


def ctx_of(request: Request) -> WebContext:
    ctx: WebContext = request.app.state.web
    return ctx


def caller(request: Request, role: Role = Role.VIEWER) -> Principal:
    ctx = ctx_of(request)
    return ctx.auth.require(request, ctx.now(), role)


class Reason(BaseModel):
    reason: str = Field("", max_length=2000, description="Why (kept in the audit log; required to reject).")


class SnoozeBody(BaseModel):
    hours: float = Field(
        gt=0,
        allow_inf_nan=False,
        description="How long to leave the workload alone (policy.snooze.max_hours at most).",
    )
    reason: str = Field(
        min_length=1,
        max_length=2000,
        pattern=r"\S",
        description="Why (kept in the audit log and shown to the owner); required. A new snooze "
        "replaces the workload's current one.",
    )


class RuleText(BaseModel):
    text: str = Field(
        max_length=100_000, description="A rule pack in YAML: `rules: [ {name, kind, when, ...} ]`."
    )


def _paged(request: Request, listing: data.Listing) -> Response:
    """One page as the JSON list it always was; the next page's link in the ``Link`` header."""
    resp = data.json_response(listing.rows)
    if listing.next_before is not None:
        params = {k: v for k, v in request.query_params.items() if k != "before"}
        url = f"{request.url.path}?{urlencode({**params, 'before': listing.next_before})}"
        resp.headers["link"] = f'<{url}>; rel="next"'
        resp.headers["x-next-before"] = str(listing.next_before)
    return resp


def _export(rows: Iterable[dict[str, Any]], columns: tuple[str, ...], fmt: str, name: str) -> Response:
    """Every match, streamed a chunk at a time (the store is read a chunk at a time too)."""
    if fmt == "csv":
        return StreamingResponse(
            data.csv_lines(rows, columns),
            media_type="text/csv; charset=utf-8",
            headers={"content-disposition": f'attachment; filename="{name}.csv"'},
        )
    return StreamingResponse(data.json_lines(rows), media_type="application/json")


def _listed(
    request: Request, listing: data.Listing, columns: tuple[str, ...], fmt: str, name: str
) -> Response:
    if fmt == "csv":
        return PlainTextResponse(
            data.to_csv(listing.rows, columns),
            media_type="text/csv",
            headers={"content-disposition": f'attachment; filename="{name}.csv"'},
        )
    return _paged(request, listing)


def refused(e: ControlError) -> Response:
    """A control the store refused: 404 when what it names does not exist, else 409."""
    text = str(e)
    return data.json_response({"error": text}, 404 if text.startswith("no ") else 409)


@router.get("/me", summary="Who the caller is")
def me(request: Request) -> dict[str, str]:
    who = caller(request)
    return {"name": who.name, "role": who.role.value, "via": who.via}


@router.get("/overview", summary="Cluster utilisation, idle GPUs, waste and savings, recent actions")
def overview(request: Request) -> Response:
    caller(request)
    return data.json_response(
        {**overview_data.for_context(ctx_of(request)), "cluster": ctx_of(request).settings.web.cluster_name}
    )


All = Annotated[
    bool, Query(description="Every match from `before` on, streamed (limit ignored); the default for CSV.")
]
Format = Literal["json", "csv"]


@router.get("/findings", summary="Finding episodes, newest first (paged: see the Link header)")
def findings(request: Request, query: Annotated[FindingQuery, Depends(finding_query)]) -> Response:
    caller(request)
    ctx = ctx_of(request)
    return _paged(request, data.findings(ctx.store, ctx.gpus(), query, reads_of(request)))


@router.get("/workloads/{workload_id:path}", summary="A workload: findings, decisions, actions, notices")
def workload(request: Request, workload_id: str) -> Response:
    caller(request)
    ctx = ctx_of(request)
    found = data.workload(ctx.store, workload_id, ctx.gpus())
    if found is None:
        return JSONResponse({"error": f"no workload {workload_id!r}"}, status_code=404)
    return data.json_response(found)


@router.post("/workloads/{workload_id:path}/snooze", summary="Leave a workload alone for a while")
def snooze(request: Request, workload_id: str, body: SnoozeBody) -> Response:
    who = caller(request, Role.OPERATOR)
    try:
        rec = ctx_of(request).snooze(workload_id, hours=body.hours, by=who.name, reason=body.reason)
    except ControlError as e:
        return refused(e)
    return data.json_response(rec.to_dict())


@router.get("/actions", summary="Actions, newest first (paged; format=csv or all=true to export)")
def actions(
    request: Request,
    query: Annotated[ActionQuery, Depends(action_query)],
    format: Format = "json",
    all: All = False,
) -> Response:
    caller(request)
    store = ctx_of(request).store
    if all or (format == "csv" and query.limit is None):
        return _export(data.every_action(store, query), data.ACTION_COLUMNS, format, "actions")
    listing = data.actions(store, query, reads_of(request))
    return _listed(request, listing, data.ACTION_COLUMNS, format, "actions")


@router.get("/audit", summary="The audit log, newest first (paged; format=csv or all=true to export)")
def audit(
    request: Request,
    query: Annotated[AuditQuery, Depends(audit_query)],
    format: Format = "json",
    all: All = False,
) -> Response:
    caller(request)
    store = ctx_of(request).store
    if all or (format == "csv" and query.limit is None):
        return _export(data.every_audit(store, query), data.AUDIT_COLUMNS, format, "audit")
    return _listed(request, data.audit(store, query, reads_of(request)), data.AUDIT_COLUMNS, format, "audit")


@router.get("/approvals", summary="Approval requests, newest first")
def approvals(request: Request, query: Annotated[ApprovalQuery, Depends(approval_query)]) -> Response:
    caller(request)
    return data.json_response([a.to_dict() for a in data.approvals(ctx_of(request).store, query)])


def _decide(request: Request, approval_id: int, approve: bool, reason: str) -> Response:
    who = caller(request, Role.OPERATOR)
    try:
        rec = ctx_of(request).decide(approval_id, approve=approve, by=who.name, reason=reason)
    except ControlError as e:
        return refused(e)
    return data.json_response(rec.to_dict())


@router.post("/approvals/{approval_id}/approve", summary="Approve a waiting step")
def approve(request: Request, approval_id: ApprovalId, body: Reason | None = None) -> Response:
    return _decide(request, approval_id, True, body.reason if body else "")


@router.post("/approvals/{approval_id}/reject", summary="Reject a waiting step (a reason is required)")
def reject(request: Request, approval_id: ApprovalId, body: Reason) -> Response:
    return _decide(request, approval_id, False, body.reason)


@router.get("/rules", summary="The rules in force")
def rules(request: Request) -> Response:
    caller(request)
    return data.json_response([rule_data.rule_row(r) for r in ctx_of(request).rules])


@router.post("/rules/preview", summary="Validate a rule pack and show what it would flag right now")
def rules_preview(request: Request, body: RuleText) -> Response:
    caller(request)
    ctx = ctx_of(request)
    try:
        compiled, rows = rule_data.preview(body.text, ctx.steward(), ctx.now())
    except RuleError as e:
        return JSONResponse({"valid": False, "error": str(e), "line": e.line}, status_code=422)
    return data.json_response(
        {
            "valid": True,
            "rules": [rule_data.rule_row(r) for r in compiled],
            "live": ctx.steward() is not None,
            "findings": rows,
        }
    )


@router.get("/settings", summary="Mode, pause state, roll-out scopes and what the caller may do")
def settings(request: Request) -> Response:
    who = caller(request)
    ctx = ctx_of(request)
    pause = ctx.store.pause_state()
    return data.json_response(
        {
            "mode": "dry-run" if ctx.dry_run else "enforce",
            "paused": pause.paused,
            "paused_by": pause.by,
            "paused_reason": pause.reason,
            "paused_at": pause.at,
            "source": ctx.settings.source.name,
            "tick_seconds": ctx.settings.tick_seconds,
            "role": who.role.value,
            "scopes": rollout_data.scopes(ctx.store, ctx.settings.policy),
        }
    )


@router.post("/pause", summary="The kill switch: no action from the next tick on")
def pause(request: Request, body: Reason | None = None) -> Response:
    who = caller(request, Role.OPERATOR)
    ctx_of(request).set_paused(True, by=who.name, reason=body.reason if body else "")
    return data.json_response({"paused": True})


@router.post("/resume", summary="Release the kill switch")
def resume(request: Request, body: Reason | None = None) -> Response:
    who = caller(request, Role.OPERATOR)
    ctx_of(request).set_paused(False, by=who.name, reason=body.reason if body else "")
    return data.json_response({"paused": False})
