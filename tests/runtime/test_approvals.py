"""Approvals in the action path, end to end on the small simulated cluster (enforce mode)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpusteward.domain.errors import ControlError
from gpusteward.domain.models import ActionStatus, ApprovalStatus, Hold, Level
from gpusteward.runtime.owner_controls import decide_approval


def stops(store, wid=None):
    return [a for a in store.actions(limit=1000, workload_id=wid) if a.level >= Level.GRACEFUL_STOP]


def test_stops_wait_for_approval_then_run_once_rejected_never_expired_asked_again(
    make_steward, settings_for, run_for
):
    # Three hours: the notebook's stop comes only after two hours idle (the interactive class's
    # rule), and the jobs' requests, made in the first hour, must still be pending then.
    settings = settings_for(policy={"approval": {"min_level": "L2", "expire_hours": 3}})
    steward, _, clock, notifier = make_steward(settings)
    store = steward.store
    reports = run_for(steward, clock, minutes=180)

    pending = store.approvals(ApprovalStatus.PENDING)
    assert len(pending) == 3, [r.to_dict() for r in store.approvals()]
    assert stops(store) == []  # nothing stopped without an approval
    waiting = [d for r in reports for d in r.decisions if d.hold is Hold.AWAITING_APPROVAL]
    assert {d.workload_id for d in waiting} == {p.workload_id for p in pending}
    assert all(d.step == "graceful-stop" and d.idempotency_key for d in waiting)
    # Admins were told once per request, with the command to approve it.
    admin = [n for n in notifier.sent if n.owner is None]
    assert len(admin) == 3
    assert all(f"gpusteward approvals approve {p.id}" in n.body for p, n in zip(pending, admin, strict=True))

    ok, no, lapse = pending
    decide_approval(store, ok.id, approve=True, by="alice", reason="owner agreed", now=clock.now())
    decide_approval(store, no.id, approve=False, by="bob", reason="paper deadline", now=clock.now())
    run_for(steward, clock, minutes=2)
    (stop,) = stops(store)
    assert (stop.workload_id, stop.status, stop.idempotency_key) == (
        ok.workload_id,
        ActionStatus.SUCCEEDED,
        ok.idempotency_key,
    )
    assert store.approval(ok.id).status is ApprovalStatus.USED
    decisions = store.decisions_for(no.workload_id)
    assert decisions[-1].hold is Hold.REJECTED
    assert "paper deadline" in decisions[-1].reason

    # The third request expires unanswered: never run, asked again while the waste holds.
    run_for(steward, clock, minutes=180)
    assert store.approval(lapse.id).status is ApprovalStatus.EXPIRED
    with pytest.raises(ControlError, match="not pending"):
        decide_approval(store, lapse.id, approve=True, by="alice", reason="", now=clock.now())
    again = [r for r in store.approvals(ApprovalStatus.PENDING) if r.workload_id == lapse.workload_id]
    assert [r.idempotency_key for r in again] == [f"{lapse.idempotency_key}~r2"]
    assert stops(store, lapse.workload_id) == []
    # The rejected step was not asked again, nor run.
    assert [r.id for r in store.approvals(None) if r.workload_id == no.workload_id] == [no.id]
    assert stops(store, no.workload_id) == []
    events = [r.event for r in store.audit_log(limit=10_000)]
    assert {"approval.requested", "approval.approved", "approval.rejected", "approval.expired"} <= set(events)

    # Approving the new request lets the step run on its first (unchanged) idempotency key.
    decide_approval(store, again[0].id, approve=True, by="alice", reason="", now=clock.now())
    run_for(steward, clock, minutes=2)
    (late,) = stops(store, lapse.workload_id)
    assert late.idempotency_key == lapse.idempotency_key


def test_dry_run_asks_nobody_and_previews_every_step(make_steward, settings_for, run_for):
    steward, _, clock, notifier = make_steward(settings_for(mode="dry-run"))
    run_for(steward, clock, minutes=90)
    assert steward.store.approvals() == []
    assert {a.step for a in steward.store.actions(limit=1000)} >= {"graceful-stop"}
    assert not [n for n in notifier.sent if n.owner is None]


def test_an_approval_for_a_finished_workload_is_refused(make_steward, settings_for, run_for):
    settings = settings_for(policy={"approval": {"min_level": "L2"}})
    steward, _, clock, _ = make_steward(settings)
    run_for(steward, clock, minutes=60)
    req = steward.store.approvals(ApprovalStatus.PENDING)[0]
    later = clock.now() + timedelta(hours=1)  # the agent stopped watching: nothing is running now
    # last_seen_at is kept to store.db.SEEN_EVERY (5 min): an hour and up to 5 minutes ago.
    with pytest.raises(ControlError, match=r"last seen 6[0-5] min ago"):
        decide_approval(steward.store, req.id, approve=True, by="alice", reason="", now=later)
    with pytest.raises(ControlError, match="no approval request 999"):
        decide_approval(steward.store, 999, approve=True, by="alice", reason="", now=clock.now())
