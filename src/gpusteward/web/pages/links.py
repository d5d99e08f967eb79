"""One-click links from notices (``/l/<signed token>``): no login, the signature is the
authority, and a confirm button (a POST) makes the change, so a mail scanner that fetches the
link cannot use it up."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from gpusteward.domain.errors import ControlError
from gpusteward.notify.links import LinkError, LinkSigner, verify
from gpusteward.web.auth import AuthError, read_form
from gpusteward.web.pages.base import ctx_of, message, render

router = APIRouter(include_in_schema=False)


def _link_claims(request: Request, token: str) -> dict[str, Any]:
    ctx = ctx_of(request)
    return verify(ctx.auth.key, LinkSigner.PURPOSE, token, now=ctx.now())


def _describe(claims: dict[str, Any]) -> str:
    do = claims.get("do")
    if do in ("approve", "reject"):
        return f"{do} approval request {claims.get('approval')}"
    if do == "snooze":
        return f"snooze {claims.get('workload')} for {claims.get('hours')} h"
    if do == "appeal":
        return f"appeal the stop of {claims.get('workload')} (it was doing useful work)"
    return "nothing (unknown link)"


@router.get("/l/{token}")
def link_form(request: Request, token: str) -> Response:
    ctx = ctx_of(request)
    try:
        claims = _link_claims(request, token)
    except LinkError as e:
        return message(request, None, 403, "Link refused", str(e))
    if ctx.access.link_used(str(claims["n"])):
        return message(request, None, 409, "Link refused", "this link was used already")
    csrf = ctx.auth.login_csrf(request)
    resp = render(
        request, None, "link.html.j2", token=token, claims=claims, what=_describe(claims), login_csrf=csrf
    )
    ctx.auth.set_login_csrf(resp, csrf)
    return resp


@router.post("/l/{token}")
async def link_use(request: Request, token: str) -> Response:
    ctx = ctx_of(request)
    form = await read_form(request)
    if not ctx.auth.check_login_csrf(request, form.get("csrf", "")):
        raise AuthError(403, "missing or wrong CSRF token: open the link again")
    try:
        claims = _link_claims(request, token)
    except LinkError as e:
        return message(request, None, 403, "Link refused", str(e))
    if claims.get("do") not in ("approve", "reject", "snooze", "appeal"):
        return message(request, None, 400, "Link refused", "unknown link")
    if not ctx.access.use_link(str(claims["n"]), str(claims["do"]), at=ctx.now()):
        return message(request, None, 409, "Link refused", "this link was used already")
    by = f"link:{claims.get('to', '?')}"
    reason = form.get("reason", "").strip() or "by one-click link"
    try:
        if claims["do"] == "snooze":
            ctx.snooze(str(claims["workload"]), hours=float(claims["hours"]), by=by, reason=reason)
        elif claims["do"] == "appeal":
            ctx.appeal(str(claims["workload"]), by=by, reason=reason)
        else:
            ctx.decide(int(claims["approval"]), approve=claims["do"] == "approve", by=by, reason=reason)
    except ControlError as e:
        return message(request, None, 409, "Not done", str(e))
    return message(request, None, 200, "Done", f"Done: {_describe(claims)}.")
