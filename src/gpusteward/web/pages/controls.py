"""The pages that change something: approvals, snoozes and the kill switch (settings)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from gpusteward.domain.errors import ControlError
from gpusteward.domain.models import ApprovalStatus
from gpusteward.store.access import Role
from gpusteward.web import data, rollout_data
from gpusteward.web.auth import read_form
from gpusteward.web.filters import ApprovalId, ApprovalQuery, approval_query
from gpusteward.web.pages.base import back, ctx_of, form_bool, message, render, safe_next, who

router = APIRouter(include_in_schema=False)


@router.post("/workloads/{workload_id:path}/snooze")
async def snooze(request: Request, workload_id: str) -> Response:
    form = await read_form(request)
    caller = who(request, Role.OPERATOR, form)
    path = f"/workloads/{quote(workload_id, safe='/:')}"
    try:
        hours = float(form.get("hours", "0"))
        ctx_of(request).snooze(workload_id, hours=hours, by=caller.name, reason=form.get("reason", ""))
    except ValueError:
        return back(path, "hours must be a number")
    except ControlError as e:
        return message(request, caller, 409, "Not snoozed", str(e), path)
    return back(path, f"snoozed for {hours:g} h")


@router.get("/approvals")
def approvals(
    request: Request, query: Annotated[ApprovalQuery, Depends(approval_query)], note: str = ""
) -> Response:
    caller = who(request)
    rows = data.approvals(ctx_of(request).store, query)
    pending = [a for a in rows if a.status is ApprovalStatus.PENDING]
    done = [a for a in rows if a.status is not ApprovalStatus.PENDING]
    return render(request, caller, "approvals.html.j2", pending=pending, done=done, note=note)


@router.post("/approvals/{approval_id}")
async def decide(request: Request, approval_id: ApprovalId) -> Response:
    form = await read_form(request)
    caller = who(request, Role.OPERATOR, form)
    approve = form.get("decision") == "approve"
    try:
        ctx_of(request).decide(approval_id, approve=approve, by=caller.name, reason=form.get("reason", ""))
    except ControlError as e:
        return message(request, caller, 409, "Not decided", str(e), "/approvals")
    return back("/approvals", f"request {approval_id} {'approved' if approve else 'rejected'}")


@router.get("/settings")
def settings(request: Request, note: str = "") -> Response:
    caller = who(request)
    ctx = ctx_of(request)
    tokens = ctx.access.tokens() if caller.can(Role.ADMIN) else []
    return render(
        request,
        caller,
        "settings.html.j2",
        note=note,
        tokens=tokens,
        source=ctx.settings.source.name,
        scopes=rollout_data.scopes(ctx.store, ctx.settings.policy),
    )


@router.post("/settings/pause")
async def set_pause(request: Request) -> Response:
    form = await read_form(request)
    caller = who(request, Role.OPERATOR, form)
    # Strict: a value that is neither true nor false used to read as "not paused" and resume.
    paused = form_bool(form, "paused")
    ctx_of(request).set_paused(paused, by=caller.name, reason=form.get("reason", ""))
    return back(safe_next(form.get("next", "/settings")), "paused" if paused else "resumed")
