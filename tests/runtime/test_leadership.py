"""High availability on the real PostgreSQL: one leader acts, the other takes over when it dies."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.models import Level
from gpusteward.integrations.sim.behaviours import Behaviour
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.registry import build_leadership
from gpusteward.store.leadership import AlwaysLeader, PostgresLeadership, lock_key

from .conftest import small_settings


def kill_backend(url: str, pid: int | None) -> None:
    assert pid is not None
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    engine.dispose()


def test_one_lock_per_schema_taken_over_when_its_session_dies(pg_url: str) -> None:
    a = PostgresLeadership(pg_url, lease_name="t")
    b = PostgresLeadership(pg_url, lease_name="t")
    other = PostgresLeadership(pg_url, lease_name="another")
    try:
        assert a.acquire()
        assert a.acquire()  # renewing does not stack the lock
        assert not b.acquire()
        assert other.acquire()  # another name is another lock
        kill_backend(pg_url, a.backend_pid())  # the leader's session dies (a crash, a network cut)
        assert not a.acquire()  # it notices at once and stops acting
        assert b.acquire()
        assert not a.acquire()
        b.release()  # a clean shutdown hands over at once
        assert a.acquire()
    finally:
        for x in (a, b, other):
            x.release()


def test_keys_and_the_registry() -> None:
    assert lock_key("n", "s1") != lock_key("n", "s2")
    assert -(2**63) <= lock_key("n", "s1") < 2**63
    sqlite = load_settings(None, store={"url": "sqlite:///x.db"}, ha={"leader_election": "postgres"})
    with pytest.raises(ConfigError, match=r"needs a PostgreSQL store\.url"):
        build_leadership(sqlite, None)  # type: ignore[arg-type]
    assert isinstance(build_leadership(load_settings(None), None), AlwaysLeader)  # type: ignore[arg-type]


CONTENDER = """
import sys, time
from gpusteward.store.leadership import PostgresLeadership
lead = PostgresLeadership(sys.argv[1], lease_name="proc", lease_seconds=3)
was = None
while True:
    now = lead.acquire()
    if now != was:
        print("LEADER" if now else "FOLLOWER", flush=True)
        was = now
    time.sleep(0.1)
"""


def test_two_real_processes_only_one_leads_and_the_other_takes_over(pg_url: str, tmp_path: Path) -> None:
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CONTENDER, pg_url], stdout=log.open("w"), stderr=subprocess.STDOUT
        )
        for log in logs
    ]
    try:
        _until(lambda: all(log.read_text() for log in logs))
        first = [log.read_text().split() for log in logs]
        assert sorted(s[0] for s in first) == ["FOLLOWER", "LEADER"], first
        leader = 0 if first[0][0] == "LEADER" else 1
        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait(timeout=30)
        follower = logs[1 - leader]
        _until(lambda: follower.read_text().split()[-1:] == ["LEADER"])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


def _until(cond, polls: int = 1200) -> None:
    for _ in range(polls):  # a hang guard, not a timing assertion
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition never came true")


def test_the_follower_takes_over_the_ladders_without_duplicates(make_steward, run_for, pg_url, tmp_path):
    settings = small_settings(
        tmp_path / "unused.db", store={"url": pg_url}, ha={"leader_election": "postgres"}
    )
    a, integration, clock, _ = make_steward(settings)
    b, _, _, notes_b = make_steward(settings, clock=clock, integration=integration)
    (zombie,) = {
        t.workload_id
        for t in integration.ground_truth.truths()
        if t.behaviour is Behaviour.ZOMBIE and not t.protected
    }

    def tick_both(minutes: int) -> list[tuple[bool, bool]]:
        roles = []
        for _ in range(minutes):
            ra, rb = a.tick(), b.tick()
            roles.append((ra.leader, rb.leader))
            assert not (ra.leader and rb.leader)
            assert rb.leader or not rb.actions
            clock.advance(60)
        return roles

    assert set(tick_both(12)) == {(True, False)}
    steps = [x.step for x in a.store.actions(limit=100, workload_id=zombie)]
    assert steps == ["warn-1"]
    assert notes_b.sent == []

    assert isinstance(a.leadership, PostgresLeadership)
    kill_backend(pg_url, a.leadership.backend_pid())  # the leader's lock session dies
    roles = tick_both(60)
    assert roles[0] == (False, True)
    assert set(roles) == {(False, True)}

    actions = b.store.actions(limit=1000, workload_id=zombie)
    assert Counter(x.idempotency_key for x in actions).most_common(1)[0][1] == 1
    assert [x.step for x in actions] == ["warn-1", "warn-2", "graceful-stop"]
    # The new leader kept the old one's schedule: 15 and 30 minutes after the first warning.
    since = [(x.created_at - actions[0].created_at).total_seconds() / 60 for x in actions]
    assert since == [0, 15, 30]
    assert {n.workload_id for n in notes_b.sent} >= {zombie}
    assert actions[-1].level is Level.GRACEFUL_STOP
    events = [r.event for r in b.store.audit_log(limit=10_000)]
    assert events.count("leadership.gained") == 2
    for s in (a, b):
        s.leadership.release()
        s.store.close()


class Baton:
    """Leadership handed between two stewards by the test (``holder``)."""

    def __init__(self, board: dict[str, str], name: str) -> None:
        self.board, self.me, self.name = board, name, "baton"

    def acquire(self) -> bool:
        return self.board["holder"] == self.me

    def release(self) -> None:
        pass


def test_a_leader_handed_back_its_role_reads_what_the_other_did(make_steward, tmp_path):
    """A leads, B leads for a while, A leads again: A's ladders and open episodes kept in memory
    from before are read again, so no step is taken twice or out of B's schedule."""
    settings = small_settings(tmp_path / "state.db")
    a, integration, clock, _ = make_steward(settings)
    b, _, _, _ = make_steward(settings, clock=clock, integration=integration)
    board = {"holder": "a"}
    a.leadership, b.leadership = Baton(board, "a"), Baton(board, "b")
    (zombie,) = {
        t.workload_id
        for t in integration.ground_truth.truths()
        if t.behaviour is Behaviour.ZOMBIE and not t.protected
    }
    for minute in range(60):
        board["holder"] = "b" if 12 <= minute < 24 else "a"
        a.tick()
        b.tick()
        clock.advance(60)
    actions = a.store.actions(limit=1000, workload_id=zombie)
    assert Counter(x.idempotency_key for x in actions).most_common(1)[0][1] == 1
    assert [x.step for x in actions] == ["warn-1", "warn-2", "graceful-stop"]
    since = [(x.created_at - actions[0].created_at).total_seconds() / 60 for x in actions]
    assert since == [0, 15, 30]
    open_ = [e for e in a.store.findings_for(zombie) if e.ended_at is None]
    assert len(open_) <= 1
