"""Browser-facing hardening shared by every route (see docs/web-security.md).

* ``SecurityHeaders``: a pure-ASGI middleware that puts a strict Content-Security-Policy and its
  companion headers on every HTTP response: pages, the JSON API, /static, errors and whatever
  ``run --web`` mounts. The CSP allows no inline script or style at all, so even markup that got
  past escaping could not run.
* ``templates``: the Jinja environment with autoescaping on. Starlette's default turns it on only
  for names ending in ``.html``; ours end in ``.html.j2`` and were rendered raw.
* ``local_path``: the one check for redirect targets taken from a request (``next=``).
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from fastapi.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Same-origin everything; no inline script or style, no eval, no plugins, no framing.
CSP = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),  # for browsers without frame-ancestors
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),  # signed one-click links never leak in a Referer
    (b"cross-origin-opener-policy", b"same-origin"),
)
_NAMES = frozenset(name for name, _ in HEADERS)


class SecurityHeaders:
    """Adds ``HEADERS`` to every HTTP response, replacing any of the same name (one CSP, not two)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _NAMES]
                message = {**message, "headers": [*kept, *HEADERS]}
            await send(message)

        await self.app(scope, receive, send_secured)


def templates(directory: Path) -> Jinja2Templates:
    """Every template is HTML, so every ``{{ value }}`` is escaped; ``Markup`` marks the few
    fragments the server builds itself from escaped parts (the SVG charts)."""
    # They ship in the package: no stat() of the file on every render to see whether it changed.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(directory), autoescape=True, auto_reload=False)
    return Jinja2Templates(env=env)


def local_path(value: str, default: str = "/") -> str:
    """``value`` when it is a path on this site, else ``default``: never an open redirect.

    Browsers take ``//host`` and ``/\\host`` for another host, and drop tabs and newlines from
    a URL first (so ``/<tab>/host`` is ``//host``): one leading slash, then no second slash, no
    backslash and no control character anywhere."""
    if not value.startswith("/") or value.startswith("//"):
        return default
    if any(c == "\\" or c < " " or c == "\x7f" for c in value):
        return default
    return value
