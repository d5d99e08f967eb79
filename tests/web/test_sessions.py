"""Logging out revokes the session in the store; failed logins (form and bearer) are audited with
their source address and throttled per address and per token prefix, in bounded memory
(issue 22, item 15)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpusteward.integrations.sim import SimClock
from gpusteward.web.app import create_web_app
from gpusteward.web.auth import LOGIN_CSRF_COOKIE, SESSION_COOKIE
from gpusteward.web.live import Attached
from gpusteward.web.login_throttle import FailureWindow

from .conftest import Demo, bearer, login

MAX_FAILURES = 3
WINDOW_S = 60.0


@pytest.fixture
def clock(demo: Demo) -> SimClock:
    return SimClock(demo.clock.now())


@pytest.fixture
def strict_app(demo: Demo, clock: SimClock) -> FastAPI:
    """The web app with a small failure budget and its own clock (so the window can pass)."""
    web = demo.settings.web.model_copy(
        update={"login_max_failures": MAX_FAILURES, "login_window_seconds": WINDOW_S}
    )
    settings = demo.settings.model_copy(update={"web": web})
    return create_web_app(demo.store, settings, demo.steward.rules, live=Attached(demo.steward), clock=clock)


def _client(app: FastAPI, address: str) -> TestClient:
    return TestClient(app, client=(address, 50000))


@pytest.fixture
def strict(strict_app: FastAPI) -> Iterator[TestClient]:
    with _client(strict_app, "192.0.2.10") as c:
        yield c


def _try_login(client: TestClient, token: str) -> int:
    client.get("/login")
    resp = client.post(
        "/login",
        data={"token": token, "csrf": client.cookies.get(LOGIN_CSRF_COOKIE) or "", "next": "/"},
        follow_redirects=False,
    )
    return int(resp.status_code)


def test_logout_revokes_the_session_not_only_the_cookie(demo: Demo, client: TestClient) -> None:
    csrf = login(client, demo.tokens["viewer"])
    copied = client.cookies.get(SESSION_COOKIE) or ""
    assert copied
    out = client.post("/logout", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303
    # Someone who kept a copy of the cookie (a shared machine, a stolen cookie) is anonymous.
    with TestClient(demo.app()) as other:
        other.cookies.set(SESSION_COOKIE, copied)
        assert other.get("/", follow_redirects=False).status_code == 303
        assert other.get("/api/v1/me").status_code == 401
    assert "web.logout" in [r.event for r in demo.store.audit_log(limit=5)]


def test_logout_ends_only_its_own_session(demo: Demo, client: TestClient) -> None:
    with TestClient(demo.app()) as second:
        login(second, demo.tokens["viewer"])
        csrf = login(client, demo.tokens["viewer"])
        client.post("/logout", data={"csrf": csrf}, follow_redirects=False)
        assert second.get("/api/v1/me").status_code == 200  # the same token's other session lives


def test_failed_logins_are_audited_with_the_source_address(demo: Demo, strict: TestClient) -> None:
    assert _try_login(strict, "gst_wrong-form") == 303
    assert strict.get("/api/v1/me", headers=bearer("gst_wrong-bearer")).status_code == 401
    failed = [r.payload for r in demo.store.audit_log(limit=10) if r.event == "web.login_failed"]
    assert failed[-2:] == [
        {"address": "192.0.2.10", "via": "form"},
        {"address": "192.0.2.10", "via": "bearer"},
    ]
    assert "wrong" not in str(failed)  # the tried token is not kept


def test_the_login_form_is_throttled_per_address(demo: Demo, strict: TestClient, clock: SimClock) -> None:
    for i in range(MAX_FAILURES):
        assert _try_login(strict, f"gst_guess-{i}") == 303
    strict.get("/login")
    blocked = strict.post(
        "/login",
        data={"token": demo.tokens["viewer"], "csrf": strict.cookies.get(LOGIN_CSRF_COOKIE) or ""},
        follow_redirects=False,
    )
    assert blocked.status_code == 429  # even the right token: the answer must not tell
    assert 1 <= int(blocked.headers["retry-after"]) <= WINDOW_S
    assert strict.cookies.get(SESSION_COOKIE) is None
    clock.advance(WINDOW_S + 1)
    assert _try_login(strict, demo.tokens["viewer"]) == 303
    assert strict.get("/api/v1/me").status_code == 200


def test_bearer_tokens_are_throttled_and_other_addresses_are_not(demo: Demo, strict_app: FastAPI) -> None:
    with _client(strict_app, "192.0.2.20") as guesser, _client(strict_app, "192.0.2.21") as other:
        for i in range(MAX_FAILURES):
            assert guesser.get("/api/v1/me", headers=bearer(f"gst_g{i}")).status_code == 401
        blocked = guesser.get("/api/v1/me", headers=bearer(demo.tokens["viewer"]))
        assert blocked.status_code == 429
        assert int(blocked.headers["retry-after"]) >= 1
        assert other.get("/api/v1/me", headers=bearer(demo.tokens["viewer"])).status_code == 200


def test_one_token_prefix_is_throttled_across_addresses(demo: Demo, strict_app: FastAPI) -> None:
    guess = "gst_SAMEPREFIX"
    for i in range(MAX_FAILURES):
        with _client(strict_app, f"198.51.100.{i}") as c:
            assert c.get("/api/v1/me", headers=bearer(f"{guess}-{i}")).status_code == 401
    with _client(strict_app, "198.51.100.200") as fresh:
        assert fresh.get("/api/v1/me", headers=bearer(f"{guess}-last")).status_code == 429
        assert fresh.get("/api/v1/me", headers=bearer(demo.tokens["viewer"])).status_code == 200


def test_the_failure_window_stays_bounded() -> None:
    window = FailureWindow(max_failures=5, window_s=60, max_keys=100)
    for i in range(10_000):
        window.fail(f"addr:{i}", float(i) / 1000)
    assert len(window) == 100
    for _ in range(1000):
        window.fail("addr:busy", 20.0)
    assert window.wait_s("addr:busy", 20.0) == 60
    assert window.wait_s("addr:busy", 80.0) == 0  # the window passed: forgotten
    assert len(window._times.get("addr:busy", ())) <= 5
