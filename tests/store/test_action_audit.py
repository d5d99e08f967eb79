"""An action's state and its audit record are one write, and ``audit verify`` checks that every
state an action reached has its record (on SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from gpusteward.domain.errors import StoreError
from gpusteward.domain.models import Action, ActionStatus, Decision, Level, Owner, Workload, WorkloadKind
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.runner import ActionRunner
from gpusteward.store import audit_chain
from gpusteward.store.actions import AuditNote
from gpusteward.store.db import StateStore

T0 = datetime(2025, 3, 4, 10, 0, tzinfo=UTC)
JOB = Workload("job-1", WorkloadKind.JOB, "train", Owner("alice", "nlp"), 1, ("G0",), T0 - timedelta(hours=5))


class FixedClock:
    def now(self) -> datetime:
        return T0

    def monotonic(self) -> float:
        return 0.0

    def sleep(self, seconds: float) -> None:
        return None


def warn(key: str = "job-1:1:1:warn-1") -> Decision:
    return Decision("job-1", T0, Level.NOTIFY, "warn-1", "idle 2 h", idempotency_key=key)


def planned(store: StateStore, key: str = "job-1:1:1:warn-1") -> Action:
    action = store.plan_action(warn(key), dry_run=False, at=T0)
    assert action is not None
    return action


def verify(store: StateStore) -> audit_chain.ChainReport:
    with store.transaction("verify") as conn:
        return audit_chain.verify(conn)


def test_an_action_never_succeeds_without_its_record(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills between the state change and the audit append: neither is kept."""
    real = audit_chain.append

    def full_on_success(conn: Any, at: datetime, event: str, *args: Any) -> None:
        if event == "action.succeeded":
            raise OperationalError("INSERT INTO audit_log", {}, Exception("database or disk is full"))
        real(conn, at, event, *args)

    monkeypatch.setattr(audit_chain, "append", full_on_success)
    runner = ActionRunner(store, [], MemoryNotifier(), FixedClock(), dry_run=False)
    action = planned(store)
    with pytest.raises(StoreError, match="disk is full"):
        runner.carry_out(action, warn(), JOB)
    [row] = store.actions()
    assert row.status is ActionStatus.EXECUTING  # left for the reconciler, with its start recorded
    assert [r.event for r in store.audit_log()] == ["action.start"]
    assert verify(store).ok


def test_verify_finds_an_action_state_without_its_record(store: StateStore) -> None:
    done = planned(store, "job-1:1:1:warn-1")
    store.start_action(done.id, T0, audit=AuditNote("action.start", {"key": done.idempotency_key}))
    note = AuditNote("action.succeeded", {"key": done.idempotency_key})
    store.finish_action(done.id, ActionStatus.SUCCEEDED, "sent", T0, audit=note)
    planned(store, "job-1:1:1:warn-2")  # planned: nothing to record yet
    report = verify(store)
    assert (report.ok, report.incomplete) == (True, 0), report.problem

    # What two writers (or a crash between two transactions) used to leave behind.
    lost = planned(store, "job-1:1:1:graceful-stop")
    store.start_action(lost.id, T0, audit=AuditNote("action.start", {"key": lost.idempotency_key}))
    store.finish_action(lost.id, ActionStatus.SUCCEEDED, "stopped", T0)
    report = verify(store)
    assert not report.ok
    assert report.incomplete == 1
    assert "job-1:1:1:graceful-stop" in report.problem
    assert "succeeded but there is no action.succeeded record" in report.problem


def test_verify_counts_every_start(store: StateStore) -> None:
    action = planned(store)
    note = AuditNote("action.start", {"key": action.idempotency_key})
    store.start_action(action.id, T0, audit=note)
    failed = AuditNote("action.failed", {"key": action.idempotency_key})
    store.finish_action(action.id, ActionStatus.FAILED, "refused", T0, audit=failed)
    store.start_action(action.id, T0 + timedelta(minutes=2))  # the retry's start went unrecorded
    report = verify(store)
    assert not report.ok
    assert "2 start(s) but 1 action.start record(s)" in report.missing
