"""Who may read the hub: with ``web.token`` set, every page and ``/api/v1/hub`` route needs it,
as ``Authorization: Bearer <token>`` (scripts) or the session cookie the login form sets
(people). Unset, the hub is open to whoever reaches ``web.listen`` (loopback by default).

The cookie holds an HMAC of the token under a key made at start, never the token itself: it
stops working when the token changes or the hub restarts. HttpOnly, SameSite=Strict. The hub
changes nothing, so no route needs CSRF protection beyond the login form's SameSite cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE = "gst_hub"
OPEN_PATHS = ("/healthz", "/static/", "/login")


class HubAccess:
    def __init__(self, token: str | None) -> None:
        self.token = token
        self._key = secrets.token_bytes(32)

    @property
    def required(self) -> bool:
        return self.token is not None

    def cookie_value(self) -> str:
        assert self.token is not None
        return hmac.new(self._key, self.token.encode(), hashlib.sha256).hexdigest()

    def token_ok(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def allowed(self, request: Request) -> bool:
        if self.token is None or request.url.path.startswith(OPEN_PATHS):
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and given:
            return self.token_ok(given.strip())
        cookie = request.cookies.get(COOKIE, "")
        return bool(cookie) and hmac.compare_digest(cookie.encode(), self.cookie_value().encode())


class RequireAccess:
    """Pure ASGI: a refused API call gets 401 JSON, a refused page a redirect to the login form."""

    def __init__(self, app: ASGIApp, access: HubAccess) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.access.allowed(Request(scope)):
            await self.app(scope, receive, send)
            return
        if scope["path"].startswith("/api/"):
            body, status = b'{"error": "send Authorization: Bearer <the hub\'s web.token>"}', 401
            headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
        else:
            body, status = b"", 303
            headers = [(b"location", b"/login")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
