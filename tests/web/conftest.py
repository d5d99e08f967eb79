"""A steward that ran the built-in simulated cluster for two simulated hours, its state database,
tokens of each role, and the web app over it (in-process with TestClient, or served by uvicorn)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpusteward.domain.models import ApprovalStatus, Hold
from gpusteward.integrations.sim import DEFAULT_START, SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.runtime.loop import Steward
from gpusteward.store.access import AccessStore
from gpusteward.web.app import create_web_app
from gpusteward.web.auth import LOGIN_CSRF_COOKIE
from gpusteward.web.live import Attached
from gpusteward.web.serve import BackgroundServer

SIM_MINUTES = 150


def covered_slices(settings: Settings) -> int:
    """How many of the overview's 12 utilisation slices the simulated run filled: the window
    (4 h by default) is longer than the run, and a slice before the run has no data."""
    return int(SIM_MINUTES * 12 // settings.store.window_minutes)


@dataclass
class Demo:
    steward: Steward
    settings: Settings
    clock: SimClock
    tokens: dict[str, str]
    notifier: MemoryNotifier

    @property
    def store(self):  # type: ignore[no-untyped-def]
        return self.steward.store

    def app(self, **kw: object) -> FastAPI:
        return create_web_app(
            self.store, self.settings, self.steward.rules, live=Attached(self.steward), clock=self.clock, **kw
        )  # type: ignore[arg-type]


def demo_settings(db: Path, **overrides: object) -> Settings:
    data: dict[str, object] = {
        "mode": "enforce",
        "tick_seconds": 60,
        "source": {"name": "sim", "sim": {"scenario": "small", "history_hours": 0}},
        "store": {"url": f"sqlite:///{db}"},
        # Graceful stops wait for a person: the approvals page has something to decide.
        "policy": {"approval": {"min_level": "L2", "expire_hours": 6}},
        "web": {"secret_key": "test-signing-key-0123456789abcdef"},
    }
    data.update(overrides)
    return load_settings(None, **data)


def run_demo(db: Path) -> Demo:
    settings = demo_settings(db)
    clock = SimClock(DEFAULT_START)
    notifier = MemoryNotifier()
    steward, _ = build_steward(settings, clock=clock, notifier=notifier)
    for _ in range(SIM_MINUTES):
        steward.tick()
        clock.advance(60)
    store = steward.store
    if not store.approvals(ApprovalStatus.PENDING):
        # Until the runner asks for approvals itself, ask for the step policy held for one.
        held = [
            d
            for wid in {a.workload_id for a in store.actions(limit=500)}
            for d in store.decisions_for(wid)
            if d.hold is Hold.AWAITING_APPROVAL
        ]
        assert held, "the simulated run should hold a graceful stop for approval"
        store.request_approval(held[-1], dry_run=False, at=clock.now(), ttl=timedelta(hours=6))
    access = AccessStore(store)
    tokens = {
        role: access.create_token(f"{role}-1", role, at=clock.now())[1]
        for role in ("viewer", "operator", "admin")
    }
    return Demo(steward, settings, clock, tokens, notifier)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    return run_demo(tmp_path_factory.mktemp("web") / "state.db")


def wait_for(check: Callable[[], object], what: str, limit_s: float = 30.0) -> None:
    """Poll ``check`` until it is true; fail the test if ``limit_s`` passes first (a bound on a
    hang, not a timing assertion)."""
    deadline = time.monotonic() + limit_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {limit_s:g} s")
        time.sleep(0.05)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def login(client: TestClient, token: str) -> str:
    """Log in through the form; returns the session's CSRF value (from the page)."""
    client.get("/login")
    resp = client.post(
        "/login",
        data={"token": token, "csrf": client.cookies.get(LOGIN_CSRF_COOKIE) or "", "next": "/"},
        follow_redirects=False,
    )
    assert resp.status_code == 303, resp.text
    assert resp.headers["location"] == "/"
    page = client.get("/settings").text
    marker = 'name="csrf" value="'
    return page.split(marker, 1)[1].split('"', 1)[0]


@pytest.fixture
def client(demo: Demo) -> Iterator[TestClient]:
    with TestClient(demo.app()) as c:
        yield c


@pytest.fixture
def served(demo: Demo) -> Iterator[str]:
    """The web app served by uvicorn on a free loopback port."""
    server = BackgroundServer(demo.app(), "127.0.0.1", 0)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


@pytest.fixture
def artifacts() -> Path:
    """Where browser screenshots go: $GPUSTEWARD_TEST_ARTIFACTS or tests/artifacts/web."""
    base = os.environ.get("GPUSTEWARD_TEST_ARTIFACTS")
    path = Path(base) if base else Path(__file__).parents[1] / "artifacts"
    path = path / "web"
    path.mkdir(parents=True, exist_ok=True)
    return path
