"""The web admin app factory. Nothing is built at import time: ``create_web_app`` takes the
store, settings and rules (and, under ``run --web``, the loop's steward) and returns the app.

Routes: the pages (``pages``), the JSON API under ``/api/v1`` (``api``) with its OpenAPI
document at ``/api/v1/openapi.json`` (for logged-in callers), and ``/static`` (CSS and the
vendored htmx; no CDN). ``mount`` (``run --web``) serves another app's routes after these:
the loop's ``/metrics``, ``/healthz`` and Alertmanager receiver.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp

from gpusteward.analysis.rules import CompiledRule
from gpusteward.domain.ports import Clock, SystemClock
from gpusteward.notify.links import LinkSigner
from gpusteward.runtime.config import Settings
from gpusteward.store.access import AccessStore
from gpusteward.store.db import StateStore
from gpusteward.store.stamp import stamper
from gpusteward.web import api, fleet_api, pages, rollout_api, showback_api
from gpusteward.web.auth import Auth, AuthError
from gpusteward.web.context import WebContext
from gpusteward.web.limits import BodyLimit
from gpusteward.web.live import Live, Nothing
from gpusteward.web.login_throttle import LoginGuard
from gpusteward.web.read_cache import ReadCache
from gpusteward.web.remote_write import RemoteWrite
from gpusteward.web.security import SecurityHeaders

STATIC = Path(__file__).parent / "static"


def signing_key(settings: Settings, access: AccessStore) -> bytes:
    """``web.secret_key``, or the key kept in the state database."""
    given = settings.web.secret_key
    return given.get_secret_value().encode() if given is not None else access.secret()


def create_web_app(
    store: StateStore,
    settings: Settings,
    rules: Sequence[CompiledRule],
    *,
    live: Live | None = None,
    clock: Clock | None = None,
    mount: ASGIApp | None = None,
    on_rules_saved: Callable[[list[CompiledRule]], None] | None = None,
    processes: int = 1,
) -> FastAPI:
    """The web admin. ``processes``: how many serve the same socket (``serve --workers``); each
    counts failed logins on its own, so each allows its share of ``web.login_max_failures``."""
    access = AccessStore(store)
    key = signing_key(settings, access)
    ctx = WebContext(
        store=store,
        settings=settings,
        rules=list(rules),
        access=access,
        auth=Auth(
            access,
            key,
            session_hours=settings.web.session_hours,
            secure=settings.web.secure_cookies,
            guard=LoginGuard(
                store,
                max_failures=math.ceil(settings.web.login_max_failures / processes),
                window_s=settings.web.login_window_seconds,
            ),
            reads=ReadCache(stamper(store) if settings.web.read_cache else None),
        ),
        clock=clock or SystemClock(),
        live=live or Nothing(),
        links=LinkSigner(key, settings.web.link_base(), ttl_hours=settings.web.link_hours),
        on_rules_saved=on_rules_saved,
    )
    app = FastAPI(
        title="gpusteward",
        summary="Findings, actions, approvals and the kill switch of a gpusteward agent.",
        version="1",
        docs_url=None,  # Swagger UI would load from a CDN; the document is enough
        redoc_url=None,
        openapi_url=None,
    )
    app.state.web = ctx
    app.add_middleware(BodyLimit, max_bytes=settings.web.max_body_bytes)
    app.add_middleware(RemoteWrite, ctx=ctx)  # outside BodyLimit: POST /api/v1/write has its own limits

    @app.exception_handler(AuthError)
    async def _refused(request: Request, e: AuthError) -> Response:
        resp = _refusal(request, e)
        if e.retry_after is not None:
            resp.headers["retry-after"] = str(e.retry_after)
        return resp

    def _refusal(request: Request, e: AuthError) -> Response:
        if request.url.path.startswith("/api/"):
            headers = {"www-authenticate": "Bearer"} if e.status == 401 else None
            return JSONResponse({"error": e.message}, status_code=e.status, headers=headers)
        if e.status == 401:
            nxt = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            if request.headers.get("hx-request"):
                return Response(status_code=401, headers={"hx-redirect": "/login"})
            return RedirectResponse(f"/login?{urlencode({'next': nxt})}", status_code=303)
        return pages.message(request, None, e.status, "Refused", e.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError) -> Response:
        # An anonymous caller learns nothing, not even the expected body.
        who = ctx.auth.principal(request, ctx.now())
        if who is None:
            if not request.url.path.startswith("/api/"):
                return _refusal(request, AuthError(401, "log in"))
            return JSONResponse({"error": "log in or send Authorization: Bearer <token>"}, status_code=401)
        details = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()[:10]]
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": "invalid request", "problems": details}, status_code=422)
        # A page: the problem in words (escaped like any text), never the request echoed back raw.
        return pages.message(request, who, 422, "Invalid request", "; ".join(details))

    @app.get("/api/v1/openapi.json", include_in_schema=False)
    def openapi(request: Request) -> dict[str, Any]:
        ctx.auth.require(request, ctx.now())
        return app.openapi()

    app.include_router(api.router)
    app.include_router(rollout_api.router)
    app.include_router(showback_api.router)
    app.include_router(fleet_api.router)
    for router in pages.ROUTERS:
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    if mount is not None:
        app.mount("/", mount)
    # Outermost but for Starlette's 500 handler: every route, /static, the mount and the
    # handled errors (401, 403, 404, 422) get the CSP and its companion headers.
    app.add_middleware(SecurityHeaders)
    return app
