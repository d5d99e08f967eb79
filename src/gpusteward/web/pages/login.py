"""Log in with an API token (a signed session cookie follows), and log out (the session is
revoked in the store, not only forgotten by the browser)."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from gpusteward.web.auth import AuthError, read_form
from gpusteward.web.pages.base import ctx_of, message, render, safe_next, who

router = APIRouter(include_in_schema=False)
LOGIN_ERRORS = {"token": "unknown or revoked token"}


@router.get("/login")
def login_form(request: Request, next: str = "/", error: str = "") -> Response:
    ctx = ctx_of(request)
    csrf = ctx.auth.login_csrf(request)
    # Only our own messages, by code: an anonymous link must not put its words on this page.
    why = LOGIN_ERRORS.get(error, "")
    resp = render(request, None, "login.html.j2", login_csrf=csrf, next=safe_next(next), error=why)
    ctx.auth.set_login_csrf(resp, csrf)
    return resp


@router.post("/login")
async def login(request: Request) -> Response:
    ctx = ctx_of(request)
    form = await read_form(request)
    if not ctx.auth.check_login_csrf(request, form.get("csrf", "")):
        raise AuthError(403, "missing or wrong CSRF token: reload the login page")
    token = form.get("token", "").strip()
    wait = ctx.auth.guard.wait_s(request, token, ctx.now())
    if wait:
        refused = message(request, None, 429, "Too many failed logins", f"Try again in {wait} s.", "/login")
        refused.headers["retry-after"] = str(wait)
        return refused
    rec = ctx.access.authenticate(token, at=ctx.now())
    nxt = safe_next(form.get("next", "/"))
    if rec is None:
        ctx.auth.guard.failed(request, token, ctx.now(), via="form")
        query = urlencode({"next": nxt, "error": "token"})
        return RedirectResponse(f"/login?{query}", status_code=303)
    resp = RedirectResponse(nxt, status_code=303)
    ctx.auth.start_session(resp, rec, ctx.now())
    ctx.store.audit("web.login", ctx.now(), None, name=rec.name, role=rec.role.value)
    return resp


@router.post("/logout")
async def logout(request: Request) -> Response:
    form = await read_form(request)
    who(request, form=form)
    ctx = ctx_of(request)
    ctx.auth.revoke_session(request, ctx.now())
    resp = RedirectResponse("/login", status_code=303)
    ctx.auth.end_session(resp)
    return resp
