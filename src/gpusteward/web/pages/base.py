"""What every page route shares: the template environment, the caller, the base values each
template gets, redirects with a note, and the pager links."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from markupsafe import Markup

from gpusteward.store.access import Role
from gpusteward.web.auth import Principal
from gpusteward.web.context import WebContext
from gpusteward.web.read_cache import reads_of
from gpusteward.web.security import local_path, templates

TEMPLATES = templates(Path(__file__).parent.parent / "templates")  # autoescaped


def ctx_of(request: Request) -> WebContext:
    ctx: WebContext = request.app.state.web
    return ctx


def who(request: Request, role: Role = Role.VIEWER, form: dict[str, str] | None = None) -> Principal:
    ctx = ctx_of(request)
    return ctx.auth.require(
        request, ctx.now(), role, form_csrf=None if form is None else form.get("csrf", "")
    )


def render(
    request: Request, caller: Principal | None, template: str, code: int = 200, **values: Any
) -> HTMLResponse:
    ctx = ctx_of(request)
    pause = reads_of(request).get(("pause",), ctx.store.pause_state)
    base = {
        "who": caller,
        "mode": "dry-run" if ctx.dry_run else "enforce",
        "pause": pause,
        "csrf": caller.csrf if caller else "",
        "path": request.url.path,
        "now": ctx.now(),
        "currency": ctx.settings.cost.currency,
        "can_operate": bool(caller and caller.can(Role.OPERATOR)),
        "can_admin": bool(caller and caller.can(Role.ADMIN)),
        "live_error": ctx.live.error,
    }
    return TEMPLATES.TemplateResponse(request, template, {**base, **values}, status_code=code)


def message(
    request: Request, caller: Principal | None, code: int, title: str, text: str, back: str = ""
) -> HTMLResponse:
    return render(request, caller, "message.html.j2", code, title=title, message=text, back=back)


def svg(markup: str) -> Markup:
    return Markup(markup)  # noqa: S704 - built by our chart functions, which escape every text


def back(path: str, note: str = "") -> RedirectResponse:
    url = path + (("?" + urlencode({"note": note})) if note else "")
    return RedirectResponse(url, status_code=303)


def safe_next(value: str) -> str:
    return local_path(value)  # only paths on this site: never an open redirect to another host


def pager(request: Request, next_before: int | None) -> dict[str, str]:
    """Links to the next (older) page, "" on the last, and back to the newest, "" on the first."""
    params = {k: v for k, v in request.query_params.items() if k != "before"}
    path = request.url.path
    older = "" if next_before is None else f"{path}?{urlencode({**params, 'before': next_before})}"
    newest = f"{path}?{urlencode(params)}" if "before" in request.query_params else ""
    return {"older": older, "newest": newest}


def invalid_field(name: str, problem: str) -> RequestValidationError:
    """A form field that fails its check: answered like a bad query parameter (422)."""
    return RequestValidationError([{"loc": ("body", name), "msg": problem, "type": "value_error"}])


def form_bool(form: dict[str, str], name: str) -> bool:
    """``true``/``false`` (or ``1``/``0``); anything else is a 422, never a silent ``False``."""
    value = form.get(name)
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise invalid_field(name, "must be true or false")
