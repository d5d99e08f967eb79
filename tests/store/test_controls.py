"""Approval requests and snoozes in the state store, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpusteward.domain.errors import ControlError
from gpusteward.domain.models import ApprovalStatus, Decision, Level
from gpusteward.store.db import StateStore

T0 = datetime(2025, 3, 4, 10, 0, tzinfo=UTC)
TTL = timedelta(hours=2)


def force(wid: str = "job-1", key: str = "job-1:1000:1000:force") -> Decision:
    return Decision(
        wid, T0, Level.FORCE, "force", "idle 3 h", rule="idle-gpu", gpu_uuids=("G0",), idempotency_key=key
    )


def events(store: StateStore) -> list[str]:
    return [r.event for r in store.audit_log(limit=1000)]


def test_a_request_is_made_once_per_step_and_mode(store: StateStore) -> None:
    first = store.request_approval(force(), dry_run=False, at=T0, ttl=TTL)
    again = store.request_approval(force(), dry_run=False, at=T0 + timedelta(minutes=5), ttl=TTL)
    dry = store.request_approval(force(), dry_run=True, at=T0, ttl=TTL)
    assert again.id == first.id
    assert again.requested_at == T0
    assert dry.id != first.id
    assert first.status is ApprovalStatus.PENDING
    assert first.expires_at == T0 + TTL
    assert (first.level, first.step, first.gpu_uuids, first.reason) == (
        Level.FORCE,
        "force",
        ("G0",),
        "idle 3 h",
    )
    assert events(store).count("approval.requested") == 2
    assert [a.id for a in store.approvals(ApprovalStatus.PENDING, dry_run=False)] == [first.id]


def test_approve_records_who_when_and_why_then_is_used_once(store: StateStore) -> None:
    req = store.request_approval(force(), dry_run=False, at=T0, ttl=TTL)
    done = store.decide_approval(
        req.id, approve=True, by="alice", reason="owner agreed", at=T0 + timedelta(minutes=1)
    )
    assert (done.status, done.decided_by, done.decision_reason) == (
        ApprovalStatus.APPROVED,
        "alice",
        "owner agreed",
    )
    assert done.decided_at == T0 + timedelta(minutes=1)
    used = store.use_approval(req.id, T0 + timedelta(minutes=2))
    assert used.status is ApprovalStatus.USED
    with pytest.raises(ControlError, match="is used, not approved"):
        store.use_approval(req.id, T0 + timedelta(minutes=3))
    with pytest.raises(ControlError, match="not pending"):
        store.decide_approval(req.id, approve=False, by="bob", reason="late", at=T0 + timedelta(minutes=4))
    assert "approval.approved" in events(store)


def test_reject_needs_a_reason_and_a_name(store: StateStore) -> None:
    req = store.request_approval(force(), dry_run=False, at=T0, ttl=TTL)
    with pytest.raises(ControlError, match="needs a reason"):
        store.decide_approval(req.id, approve=False, by="bob", reason=" ", at=T0)
    with pytest.raises(ControlError, match="name"):
        store.decide_approval(req.id, approve=True, by="", reason="", at=T0)
    done = store.decide_approval(req.id, approve=False, by="bob", reason="still loading data", at=T0)
    assert done.status is ApprovalStatus.REJECTED
    with pytest.raises(ControlError, match="rejected, not approved"):
        store.use_approval(req.id, T0)


def test_an_expired_request_can_be_neither_approved_nor_used(store: StateStore) -> None:
    late = store.request_approval(force(), dry_run=False, at=T0, ttl=TTL)
    with pytest.raises(ControlError, match="expired"):
        store.decide_approval(late.id, approve=True, by="alice", reason="", at=T0 + TTL)
    assert store.approval(late.id).status is ApprovalStatus.EXPIRED  # type: ignore[union-attr]

    # Approved in time, but its action did not run before the expiry: it never runs.
    other = store.request_approval(force("job-2", "job-2:1:1:force"), dry_run=False, at=T0, ttl=TTL)
    store.decide_approval(other.id, approve=True, by="alice", reason="", at=T0 + timedelta(minutes=1))
    with pytest.raises(ControlError, match="expired"):
        store.use_approval(other.id, T0 + TTL + timedelta(seconds=1))
    assert store.approval(other.id).status is ApprovalStatus.EXPIRED  # type: ignore[union-attr]


def test_expire_approvals_sweeps_pending_and_unused(store: StateStore) -> None:
    a = store.request_approval(force("a", "a:1:1:force"), dry_run=False, at=T0, ttl=TTL)
    b = store.request_approval(force("b", "b:1:1:force"), dry_run=False, at=T0, ttl=TTL)
    c = store.request_approval(force("c", "c:1:1:force"), dry_run=False, at=T0 + timedelta(hours=1), ttl=TTL)
    store.decide_approval(b.id, approve=True, by="alice", reason="", at=T0)
    swept = store.expire_approvals(T0 + TTL)
    assert sorted(r.id for r in swept) == [a.id, b.id]
    assert all(r.status is ApprovalStatus.EXPIRED for r in swept)
    assert store.approval(c.id).status is ApprovalStatus.PENDING  # type: ignore[union-attr]
    assert store.expire_approvals(T0 + TTL) == []
    assert events(store).count("approval.expired") == 2


def test_unknown_approval_is_a_clear_error(store: StateStore) -> None:
    with pytest.raises(ControlError, match="no approval request 99"):
        store.decide_approval(99, approve=True, by="alice", reason="", at=T0)
    assert store.approval(99) is None


def test_snooze_replaces_the_active_one_and_ends(store: StateStore) -> None:
    store.snooze("job-1", until=T0 + timedelta(hours=4), by="alice", reason="demo tomorrow", at=T0)
    newer = store.snooze(
        "job-1", until=T0 + timedelta(hours=1), by="alice", reason="shorter", at=T0 + timedelta(minutes=5)
    )
    store.snooze("job-2", until=T0 + timedelta(hours=2), by="bob", reason="", at=T0)
    active = store.active_snoozes(T0 + timedelta(minutes=10))
    assert sorted(active) == ["job-1", "job-2"]
    assert active["job-1"].id == newer.id
    assert active["job-1"].reason == "shorter"
    assert sorted(store.active_snoozes(T0 + timedelta(hours=1, minutes=1))) == ["job-2"]
    assert store.unsnooze("job-2", by="bob", at=T0 + timedelta(minutes=30))
    assert not store.unsnooze("job-2", by="bob", at=T0 + timedelta(minutes=31))
    assert list(store.active_snoozes(T0 + timedelta(minutes=40))) == ["job-1"]
    assert [s.reason for s in store.snoozes("job-1")] == ["demo tomorrow", "shorter"]
    assert events(store).count("snooze.set") == 3
    assert "snooze.lifted" in events(store)


def test_snooze_must_end_in_the_future_and_name_who(store: StateStore) -> None:
    with pytest.raises(ControlError, match="future"):
        store.snooze("job-1", until=T0, by="alice", reason="", at=T0)
    with pytest.raises(ControlError, match="who"):
        store.snooze("job-1", until=T0 + timedelta(hours=1), by=" ", reason="", at=T0)
    assert store.snoozes() == []
