"""The Roll-out page: per scope its stage, days in it, findings, what enforce would have done,
false kills, appeals and promotion readiness (``gpusteward rollout status``); promote for admins;
the suspected false kills with confirm / dismiss for admins; and the appeal control on a
workload's page. Every change goes through ``RolloutBook`` as the CLI's does, audited there."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from gpusteward.domain.errors import ControlError
from gpusteward.store.access import Role
from gpusteward.web import rollout_data
from gpusteward.web.auth import read_form
from gpusteward.web.filters import FalseKillId, FalseKillQuery, ScopeName, false_kill_query
from gpusteward.web.pages.base import back, ctx_of, message, render, who

router = APIRouter(include_in_schema=False)


@router.get("/rollout")
def rollout(
    request: Request, query: Annotated[FalseKillQuery, Depends(false_kill_query)], note: str = ""
) -> Response:
    caller = who(request)
    ctx = ctx_of(request)
    policy = ctx.settings.policy
    return render(
        request,
        caller,
        "rollout.html.j2",
        note=note,
        scopes=rollout_data.status(ctx.store, policy, ctx.now()),
        fk=rollout_data.false_kills(ctx.store, policy, query),
        filters=query.filters(),
        figures=rollout_data.figures(ctx.store, policy),
        criteria=policy.rollout.promote_when,
        horizon=policy.rollout.false_kill_horizon_hours,
    )


@router.post("/rollout/{scope}/promote")
async def promote(request: Request, scope: ScopeName) -> Response:
    form = await read_form(request)
    caller = who(request, Role.ADMIN, form)
    force = form.get("force") in ("1", "true", "on")
    try:
        done = ctx_of(request).promote(scope, by=caller.name, force=force, reason=form.get("reason", ""))
    except ControlError as e:
        return message(request, caller, 409, "Not promoted", str(e), "/rollout")
    return back("/rollout", f"scope {done.name} is now in {done.stage.value}")


@router.post("/rollout/false-kills/{fk_id}")
async def settle(request: Request, fk_id: FalseKillId) -> Response:
    form = await read_form(request)
    caller = who(request, Role.ADMIN, form)
    decision = form.get("decision")
    if decision not in ("confirm", "dismiss"):
        return message(request, caller, 422, "Not settled", "decision must be confirm or dismiss", "/rollout")
    try:
        fk = ctx_of(request).settle_false_kill(
            fk_id, confirm=decision == "confirm", by=caller.name, reason=form.get("reason", "")
        )
    except ControlError as e:
        return message(request, caller, 409, "Not settled", str(e), "/rollout")
    return back("/rollout", f"false kill {fk.id} {fk.status}")


@router.post("/workloads/{workload_id:path}/appeal")
async def appeal(request: Request, workload_id: str) -> Response:
    form = await read_form(request)
    caller = who(request, Role.OPERATOR, form)
    ctx_of(request).appeal(workload_id, by=caller.name, reason=form.get("reason", ""))
    return back(f"/workloads/{quote(workload_id, safe='/:')}", "appeal recorded")
