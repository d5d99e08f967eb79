"""The web's read cache: answers kept per state stamp, never served after a write.

The stamp is PostgreSQL's (``store.stamp``), so the store tests run on the machine's server;
the cache's own rules run with a stamp the test sets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from gpusteward.integrations.sim import SimClock
from gpusteward.runtime.config import load_settings
from gpusteward.store.access import AccessStore
from gpusteward.store.db import StateStore
from gpusteward.store.stamp import stamper
from gpusteward.web.app import create_web_app
from gpusteward.web.auth import SESSION_COOKIE
from gpusteward.web.read_cache import ReadCache

from .conftest import login, wait_for

AT = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


class Stamps:
    def __init__(self) -> None:
        self.now = "s1"

    def __call__(self) -> str:
        return self.now


def test_an_answer_is_kept_while_the_stamp_stays_and_dropped_when_it_moves() -> None:
    stamps, calls = Stamps(), []
    cache = ReadCache(stamps)

    def read() -> list[int]:
        calls.append(stamps.now)
        return [len(calls)]

    first = cache.view().get("k", read)
    assert cache.view().get("k", read) is first
    assert cache.view().get("other", read) == [2]  # another key is its own read
    stamps.now = "s2"
    assert cache.view().get("k", read) == [3]
    assert calls == ["s1", "s1", "s2"]
    assert (cache.hits, cache.misses) == (1, 3)


def test_past_its_bound_an_answer_is_read_and_not_kept() -> None:
    cache, calls = ReadCache(Stamps(), max_entries=2), []
    for key in ("a", "b", "c", "a", "b", "c"):
        cache.view().get(key, lambda k=key: calls.append(k))
    assert calls == ["a", "b", "c", "c"]


def test_without_a_stamp_every_read_goes_to_the_store() -> None:
    cache, calls = ReadCache(None), []
    for _ in range(3):
        cache.view().get("k", lambda: calls.append(1))
    assert len(calls) == 3
    assert (cache.hits, cache.misses) == (0, 0)


def test_an_answer_read_under_a_stamp_that_was_passed_meanwhile_is_not_kept() -> None:
    stamps = Stamps()
    cache = ReadCache(stamps)
    slow = cache.view()  # a request that read s1, then waits on its query
    stamps.now = "s2"
    cache.view().get("k", lambda: "under s2")
    assert slow.get("k", lambda: "under s1") == "under s1"  # answered, not kept
    assert cache.view().get("k", lambda: "again") == "under s2"


def test_one_request_reads_the_stamp_once() -> None:
    reads = []

    def stamp() -> str:
        reads.append(1)
        return "s"

    view = ReadCache(stamp).view()
    for key in ("a", "b", "c"):
        view.get(key, lambda k=key: k)
    assert len(reads) == 1


def overlap(cache: ReadCache, slow_end: Callable[[], str], second_read: Callable[[], str]) -> list[object]:
    """Request 1 asks for "k" with a read that blocks until request 2, asking for "k" too, has
    found it in flight; then request 1's read ends with ``slow_end()``. What each request got:
    its answer, or the exception it raised."""
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait()
        return slow_end()

    got: dict[int, object] = {}

    def ask(n: int, read: Callable[[], str]) -> None:
        try:
            got[n] = cache.view().get("k", read)
        except RuntimeError as e:
            got[n] = e

    first = threading.Thread(target=ask, args=(1, slow))
    first.start()
    started.wait()
    second = threading.Thread(target=ask, args=(2, second_read))
    second.start()
    try:
        wait_for(lambda: cache.hits == 1, "the second request finding the read in flight")
    finally:
        release.set()
    first.join()
    second.join()
    return [got[1], got[2]]


def test_requests_asking_what_another_is_reading_wait_for_its_read() -> None:
    calls: list[str] = []

    def slow_end() -> str:
        calls.append("slow")
        return "read once"

    assert overlap(ReadCache(Stamps()), slow_end, lambda: "twice") == ["read once", "read once"]
    assert calls == ["slow"]


def test_a_failed_read_is_not_kept_and_a_waiting_request_makes_its_own() -> None:
    def failing() -> str:
        raise RuntimeError("database went away")

    cache = ReadCache(Stamps())
    first, second = overlap(cache, failing, lambda: "own read")
    assert str(first) == "database went away"
    assert second == "own read"
    assert cache.view().get("k", lambda: "fresh") == "fresh"


def test_a_request_that_may_write_reads_the_store_throughout() -> None:
    cache, calls = ReadCache(Stamps()), []

    def request(method: str) -> Request:
        return Request({"type": "http", "method": method, "headers": [], "state": {}})

    for method in ("POST", "POST", "GET", "GET"):
        cache.view_for(request(method)).get("k", lambda m=method: calls.append(m))
    assert calls == ["POST", "POST", "GET"]  # the second GET is answered from the first


def test_sqlite_has_no_stamp(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    store.create_schema()
    assert stamper(store) is None


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[StateStore]:
    store = StateStore(pg_url)
    store.create_schema()
    yield store
    store.close()


def served_on(
    pg_store: StateStore, pg_url: str, clock: SimClock | None = None
) -> tuple[FastAPI, ReadCache, str]:
    """The web app over the PostgreSQL store, its read cache, and a viewer's token."""
    settings = load_settings(
        None, store={"url": pg_url}, web={"secret_key": "test-signing-key-0123456789abcdef"}
    )
    token = AccessStore(pg_store).create_token("viewer-1", "viewer", at=AT)[1]
    app = create_web_app(pg_store, settings, [], clock=clock)
    return app, app.state.web.reads, token


@pytest.mark.parametrize("server", [(15, 0), (12, 0)], ids=["pg_current_snapshot", "before-13"])
def test_the_stamp_moves_with_every_write_and_only_then(
    pg_store: StateStore, pg_url: str, server: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pg_store.transaction("dialect") as conn:  # the server here is 15: the older query too
        monkeypatch.setattr(conn.dialect, "server_version_info", server)
    stamp = stamper(pg_store)
    assert stamp is not None
    idle = stamp()
    pg_store.pause_state()  # reads write nothing
    assert stamp() == idle
    pg_store.audit("test.write", AT, None)
    after_write = stamp()
    assert after_write != idle
    # A writer that began before the stamp was read and commits after it: the stamp moves too.
    other = create_engine(pg_url)
    with other.connect() as conn:
        conn.execute(text("INSERT INTO settings (key, value) VALUES ('test-in-flight', '{}')"))
        in_flight = stamp()
        conn.commit()
    assert stamp() != in_flight
    other.dispose()


def test_pages_are_answered_from_the_cache_until_another_process_writes(
    pg_store: StateStore, pg_url: str
) -> None:
    app, cache, token = served_on(pg_store, pg_url)
    pg_store.audit("test.first", AT, "wl-1")
    headers = {"authorization": f"Bearer {token}"}
    with TestClient(app) as client:
        client.get("/api/v1/me", headers=headers)  # the token's first use is a write
        first = client.get("/api/v1/audit", headers=headers).json()
        assert [r["event"] for r in first][:1] == ["test.first"]
        hits = cache.hits
        assert client.get("/api/v1/audit", headers=headers).json() == first
        assert cache.hits == hits + 2  # the token and the listing
        client.get("/audit", headers=headers)
        assert "test.first" in client.get("/audit", headers=headers).text
        # The loop, in another process, writes: the next page shows it.
        writer = StateStore(pg_url)
        writer.audit("test.second", AT, "wl-2")
        writer.close()
        again = client.get("/api/v1/audit", headers=headers).json()
        assert [r["event"] for r in again][:2] == ["test.second", "test.first"]
        assert "test.second" in client.get("/audit", headers=headers).text


def test_a_cached_token_is_refused_once_revoked_and_still_marked_used_each_minute(
    pg_store: StateStore, pg_url: str
) -> None:
    clock = SimClock(AT)
    app, cache, token = served_on(pg_store, pg_url, clock=clock)
    access = AccessStore(pg_store)
    headers = {"authorization": f"Bearer {token}"}

    def last_used() -> datetime | None:
        return access.tokens()[0].last_used_at

    with TestClient(app) as client:
        assert client.get("/api/v1/me", headers=headers).status_code == 200
        assert last_used() == AT  # the first use is written
        clock.advance(30)
        client.get("/api/v1/me", headers=headers)
        hits = cache.hits
        assert client.get("/api/v1/me", headers=headers).status_code == 200
        assert cache.hits == hits + 1  # answered from the cache, not written again
        assert last_used() == AT
        clock.advance(31)
        client.get("/api/v1/me", headers=headers)
        assert last_used() == AT + timedelta(seconds=61)
        other = StateStore(pg_url)  # an admin's `gpusteward token revoke`, another process
        AccessStore(other).revoke("viewer-1", by="admin", at=clock.now())
        other.close()
        assert client.get("/api/v1/me", headers=headers).status_code == 401


def test_a_session_is_answered_from_the_cache_and_refused_once_logged_out(
    pg_store: StateStore, pg_url: str
) -> None:
    app, cache, token = served_on(pg_store, pg_url)
    with TestClient(app) as client:
        csrf = login(client, token)
        copied = client.cookies.get(SESSION_COOKIE) or ""
        client.get("/api/v1/me")
        hits = cache.hits
        assert client.get("/api/v1/me").json()["name"] == "viewer-1"
        assert cache.hits == hits + 2  # the logout check and the token, not read again
        assert client.post("/logout", data={"csrf": csrf}, follow_redirects=False).status_code == 303
    with TestClient(app) as other:  # a kept copy of the cookie is anonymous at once
        other.cookies.set(SESSION_COOKIE, copied)
        assert other.get("/api/v1/me").status_code == 401
