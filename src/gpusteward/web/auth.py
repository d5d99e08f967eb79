"""Who is asking: API tokens (``Authorization: Bearer``) for scripts, a signed session cookie
for the pages, and CSRF protection for anything a browser can send on its own.

* The session cookie is a token signed with HMAC-SHA256 (``notify.links.sign``, purpose
  ``session``): the API token's id, an expiry and a random CSRF value. Each request re-reads the
  token, so revoking it ends its sessions at once. HttpOnly, SameSite=Lax, Secure when configured.
  Logging out revokes the session in the store (its nonce joins the used single-use nonces), so
  a copy of the cookie is dead too, not only the browser's.
* Failed logins (the form and bearer tokens) are audited and throttled (``web.throttle``).
* CSRF: a form (or an htmx request) made with the session must carry the session's CSRF value
  (field ``csrf`` or header ``X-CSRF-Token``). Bearer requests carry no ambient credential and
  need none. The login form uses a double-submit cookie (there is no session yet).
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

from fastapi import Request
from fastapi.responses import Response

from gpusteward.notify.links import LinkError, sign, verify
from gpusteward.store.access import USED_EVERY, AccessStore, Role, TokenRecord, token_hash
from gpusteward.web.login_throttle import LoginGuard
from gpusteward.web.read_cache import ReadCache

SESSION_COOKIE = "gst_session"
LOGIN_CSRF_COOKIE = "gst_login_csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Purpose under which logged-out sessions are kept among the used single-use nonces.
LOGGED_OUT = "session.logout"


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role
    #: "token" (Authorization header) or "session" (cookie: CSRF applies).
    via: str
    csrf: str = ""

    def can(self, needed: Role) -> bool:
        return self.role.allows(needed)


class AuthError(Exception):
    """401 (who are you?) or 403 (not allowed); pages turn a 401 into the login page."""

    def __init__(self, status: int, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        #: Seconds to wait (a 429 sends them as ``Retry-After``).
        self.retry_after = retry_after


def _logged_out(nonce: str) -> str:
    return f"session:{nonce}"


class Auth:
    def __init__(
        self,
        access: AccessStore,
        key: bytes,
        *,
        session_hours: float,
        secure: bool,
        guard: LoginGuard | None = None,
        reads: ReadCache | None = None,
    ) -> None:
        self.access = access
        self.reads = reads or ReadCache(None)
        self.key = key
        self.session_hours = session_hours
        self.secure = secure
        self.guard = guard or LoginGuard(access.store)

    # -- sessions -----------------------------------------------------------------------------
    def start_session(self, response: Response, token: TokenRecord, now: datetime) -> None:
        claims = {"t": token.id, "c": secrets.token_urlsafe(24)}
        value = sign(self.key, "session", claims, expires=now + timedelta(hours=self.session_hours))
        response.set_cookie(
            SESSION_COOKIE,
            value,
            max_age=int(self.session_hours * 3600),
            httponly=True,
            samesite="lax",
            secure=self.secure,
            path="/",
        )

    def end_session(self, response: Response) -> None:
        # The same attributes as when it was set, so the expiring cookie is as guarded.
        response.delete_cookie(SESSION_COOKIE, path="/", secure=self.secure, httponly=True, samesite="lax")

    def _session(self, request: Request, now: datetime) -> dict[str, Any] | None:
        cookie = request.cookies.get(SESSION_COOKIE)
        if not cookie:
            return None
        try:
            claims = verify(self.key, "session", cookie, now=now)
        except LinkError:
            return None
        return claims if isinstance(claims.get("t"), int) and claims.get("n") else None

    def revoke_session(self, request: Request, now: datetime) -> None:
        """End the request's session for good: a copy of its cookie no longer logs anyone in.
        Kept as a used single-use nonce, the table that already holds the used links."""
        claims = self._session(request, now)
        if claims is not None and self.access.use_link(_logged_out(str(claims["n"])), LOGGED_OUT, at=now):
            self.access.store.audit("web.logout", now, None, token_id=claims["t"])

    def _bearer(self, request: Request, token: str, now: datetime) -> TokenRecord | None:
        """The token's live record, from the read cache while the database is unchanged (a
        revocation is a write). Once a minute it goes to the store, which marks the token used."""
        reads = self.reads.view_for(request)
        rec = reads.get(("token", token_hash(token)), lambda: self.access.authenticate(token, at=now))
        if rec is not None and (rec.last_used_at is None or (now - rec.last_used_at) > USED_EVERY):
            rec = self.access.authenticate(token, at=now)
        return rec

    def principal(self, request: Request, now: datetime) -> Principal | None:
        """The caller, or None when anonymous. A bad or revoked credential is anonymous too."""
        header = request.headers.get("authorization", "")
        if header:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token:
                return None
            rec = self._bearer(request, token.strip(), now)
            return None if rec is None else Principal(rec.name, rec.role, "token")
        claims = self._session(request, now)
        if claims is None:
            return None
        # Both reads come from the read cache: a logout and a revocation are writes.
        reads = self.reads.view_for(request)
        nonce = _logged_out(str(claims.get("n", "")))
        if reads.get(("logged out", nonce), lambda: self.access.link_used(nonce)):
            return None
        token_id = int(claims.get("t", -1))
        rec = reads.get(("token id", token_id), lambda: self.access.token(token_id))
        if rec is None or rec.revoked_at is not None:
            return None
        return Principal(rec.name, rec.role, "session", str(claims.get("c", "")))

    def require(
        self, request: Request, now: datetime, role: Role = Role.VIEWER, *, form_csrf: str | None = None
    ) -> Principal:
        """The caller with at least ``role``; checks CSRF for unsafe requests made with the session.
        A bearer token that fails counts as a failed login."""
        header = request.headers.get("authorization", "")
        tried = header.partition(" ")[2].strip()
        if header and (wait := self.guard.wait_s(request, tried, now)):
            raise AuthError(429, f"too many failed logins: try again in {wait} s", retry_after=wait)
        who = self.principal(request, now)
        if who is None:
            if header:
                self.guard.failed(request, tried, now, via="bearer")
            raise AuthError(401, "log in or send Authorization: Bearer <token>")
        if who.via == "session" and request.method not in SAFE_METHODS:
            given = form_csrf if form_csrf is not None else request.headers.get("x-csrf-token", "")
            if not given or not hmac.compare_digest(given.encode(), who.csrf.encode()):
                raise AuthError(403, "missing or wrong CSRF token: reload the page and try again")
        if not who.can(role):
            raise AuthError(403, f"{who.name} is a {who.role.value}; this needs {role.value}")
        return who

    # -- login form (double-submit CSRF) ------------------------------------------------------
    @staticmethod
    def login_csrf(request: Request) -> str:
        return request.cookies.get(LOGIN_CSRF_COOKIE) or secrets.token_urlsafe(24)

    def set_login_csrf(self, response: Response, value: str) -> None:
        response.set_cookie(
            LOGIN_CSRF_COOKIE, value, httponly=True, samesite="strict", secure=self.secure, path="/"
        )

    @staticmethod
    def check_login_csrf(request: Request, given: str) -> bool:
        cookie = request.cookies.get(LOGIN_CSRF_COOKIE, "")
        return bool(cookie) and hmac.compare_digest(cookie.encode(), given.encode())


async def read_form(request: Request, max_bytes: int = 256 * 1024) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (what the pages' forms send) as a dict."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        raise AuthError(415, "forms must be sent as application/x-www-form-urlencoded")
    body = await request.body()
    if len(body) > max_bytes:
        raise AuthError(413, f"form over {max_bytes} bytes")
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {k: v[-1] for k, v in fields.items()}
