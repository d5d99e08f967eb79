"""The roll-out under ``/api/v1``: the same as ``gpusteward rollout status|promote|false-kills``
and ``rollout appeal``, and the Roll-out page. Promote and settle need an admin, appeal an
operator; each goes through ``RolloutBook`` (audited there) with the CLI's rules."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from gpusteward.domain.errors import ControlError
from gpusteward.policy.rollout import to_json
from gpusteward.store.access import Role
from gpusteward.web import rollout_data
from gpusteward.web.api import Reason, caller, ctx_of, refused
from gpusteward.web.data import json_response
from gpusteward.web.filters import FalseKillId, FalseKillQuery, ScopeName, false_kill_query

router = APIRouter(prefix="/api/v1", tags=["gpusteward"])


class PromoteBody(BaseModel):
    force: bool = Field(False, description="Promote without the criteria (needs a reason).")
    reason: str = Field("", max_length=2000, description="Why (kept in the audit log).")


class DismissBody(BaseModel):
    reason: str = Field(
        min_length=1, max_length=2000, pattern=r"\S", description="Why it was not a false kill (required)."
    )


@router.get("/rollout", summary="Per scope: stage, days, findings, would-have, false kills, readiness")
def status(request: Request) -> Response:
    caller(request)
    ctx = ctx_of(request)
    return json_response(rollout_data.status(ctx.store, ctx.settings.policy, ctx.now()))


@router.post("/rollout/{scope}/promote", summary="Move a scope one stage on (refused without the criteria)")
def promote(request: Request, scope: ScopeName, body: PromoteBody | None = None) -> Response:
    who = caller(request, Role.ADMIN)
    body = body or PromoteBody()
    try:
        done = ctx_of(request).promote(scope, by=who.name, force=body.force, reason=body.reason)
    except ControlError as e:
        return refused(e)
    return json_response({**done.row(), "promoted": True})


@router.get("/rollout/false-kills", summary="Suspected false kills, newest first, and reclaim counts")
def false_kills(request: Request, query: Annotated[FalseKillQuery, Depends(false_kill_query)]) -> Response:
    caller(request)
    ctx = ctx_of(request)
    return json_response(rollout_data.false_kills(ctx.store, ctx.settings.policy, query))


def _settle(request: Request, fk_id: int, confirm: bool, reason: str) -> Response:
    who = caller(request, Role.ADMIN)
    try:
        fk = ctx_of(request).settle_false_kill(fk_id, confirm=confirm, by=who.name, reason=reason)
    except ControlError as e:
        return refused(e)
    return json_response(to_json(fk))


@router.post("/rollout/false-kills/{fk_id}/confirm", summary="It was a false kill: counts against promotion")
def confirm(request: Request, fk_id: FalseKillId, body: Reason | None = None) -> Response:
    return _settle(request, fk_id, True, body.reason if body else "")


@router.post("/rollout/false-kills/{fk_id}/dismiss", summary="It was not a false kill (a reason is required)")
def dismiss(request: Request, fk_id: FalseKillId, body: DismissBody) -> Response:
    return _settle(request, fk_id, False, body.reason)


@router.post("/workloads/{workload_id:path}/appeal", summary="Appeal a stop (a suspected false kill)")
def appeal(request: Request, workload_id: str, body: Reason | None = None) -> Response:
    who = caller(request, Role.OPERATOR)
    reason = body.reason if body else ""
    ctx_of(request).appeal(workload_id, by=who.name, reason=reason)
    return json_response({"workload_id": workload_id, "appealed": True, "by": who.name, "reason": reason})
