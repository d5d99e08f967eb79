"""Every route, page, API, /static and a mounted app alike, answers with the security headers
(CSP, framing, sniffing, referrer), whatever the status; cookies are HttpOnly and SameSite, and
Secure when ``web.secure_cookies`` is set."""

from __future__ import annotations

import re
from http.cookies import SimpleCookie

from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from gpusteward.web.app import create_web_app
from gpusteward.web.auth import LOGIN_CSRF_COOKIE, SESSION_COOKIE
from gpusteward.web.live import Attached

from .conftest import Demo, bearer
from .xss_payloads import flat_routes, mount_of

EXPECTED = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}
CSP_MUST = (
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
)


async def _metrics(scope: Scope, receive: Receive, send: Send) -> None:
    """Stands in for the loop's app that ``run --web`` mounts after the web routes."""
    await PlainTextResponse("gpusteward_up 1\n")(scope, receive, send)


def _check(resp: object, what: str) -> None:
    headers = resp.headers  # type: ignore[attr-defined]
    for name, value in EXPECTED.items():
        assert headers.get(name) == value, f"{what}: {name} is {headers.get(name)!r}"
    csp = headers.get("content-security-policy", "")
    for directive in CSP_MUST:
        assert directive in csp, f"{what}: CSP {csp!r} lacks {directive!r}"
    assert "unsafe-inline" not in csp, f"{what}: {csp}"
    assert "unsafe-eval" not in csp, f"{what}: {csp}"
    assert len(headers.get_list("content-security-policy")) == 1, what


def _urls(app: FastAPI) -> list[tuple[str, str]]:
    """(method, concrete path) for every route of the app, path parameters filled in."""
    out: list[tuple[str, str]] = []
    for route in flat_routes(app):
        if mount := mount_of(route):
            if mount.path == "/static":
                out += [("GET", "/static/style.css"), ("GET", "/static/htmx.min.js"), ("GET", "/static/no")]
            else:
                out.append(("GET", mount.path + "/metrics"))
        else:
            path = re.sub(r"\{[^}]+\}", "1", route.path)
            out += [(m, path) for m in sorted(route.methods or ()) if m != "HEAD"]
    return out


def test_every_route_sends_the_security_headers(demo: Demo) -> None:
    app = demo.app(mount=_metrics)
    urls = _urls(app)
    assert len(urls) > 30
    assert ("GET", "/metrics") in urls
    with TestClient(app) as c:
        statuses = set()
        for method, path in [*urls, ("GET", "/nowhere/at/all")]:
            for who, headers in (("anonymous", {}), ("viewer", bearer(demo.tokens["viewer"]))):
                resp = c.request(method, path, headers=headers, follow_redirects=False)
                statuses.add(resp.status_code)
                _check(resp, f"{who} {method} {path} -> {resp.status_code}")
    # Success, redirects and refusals were all among them.
    assert {200, 303, 401, 403, 404} <= statuses


def _cookies(resp: object) -> dict[str, str]:
    """Each Set-Cookie header by cookie name, as sent (attributes included)."""
    out = {}
    for line in resp.headers.get_list("set-cookie"):  # type: ignore[attr-defined]
        name = next(iter(SimpleCookie(line)))
        out[name] = line.lower()
    return out


def _flow(c: TestClient, token: str) -> list[tuple[str, str]]:
    """Log in and out; every cookie set on the way, (name, Set-Cookie line)."""
    seen: list[tuple[str, str]] = []
    form = c.get("/login")
    seen += _cookies(form).items()
    done = c.post(
        "/login",
        data={"token": token, "csrf": c.cookies.get(LOGIN_CSRF_COOKIE) or "", "next": "/"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    seen += _cookies(done).items()
    page = c.get("/settings").text
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    out = c.post("/logout", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303
    seen += _cookies(out).items()
    return seen


def test_cookies_are_httponly_and_samesite(demo: Demo) -> None:
    with TestClient(demo.app()) as c:
        seen = _flow(c, demo.tokens["viewer"])
    assert {n for n, _ in seen} == {LOGIN_CSRF_COOKIE, SESSION_COOKIE}
    assert len(seen) >= 3  # the logout's expiring cookie too
    for name, line in seen:
        assert "httponly" in line, (name, line)
        assert "samesite=lax" in line or "samesite=strict" in line, (name, line)
        assert "secure" not in line.replace("samesite", ""), (name, line)


def test_cookies_are_secure_when_configured(demo: Demo) -> None:
    web = demo.settings.web.model_copy(update={"secure_cookies": True})
    settings = demo.settings.model_copy(update={"web": web})
    app = create_web_app(
        demo.store, settings, demo.steward.rules, live=Attached(demo.steward), clock=demo.clock
    )
    with TestClient(app, base_url="https://testserver") as c:
        seen = _flow(c, demo.tokens["viewer"])
    assert len(seen) >= 3
    for name, line in seen:
        assert "; secure" in line, (name, line)
        assert "httponly" in line, (name, line)
