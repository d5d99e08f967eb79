"""One suite over every implementation of the store's ports (SQLite, PostgreSQL, memory), so the
in-memory store the simulator and tests use cannot drift from the SQL one the agent runs on."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.errors import ControlError, StoreError
from gpusteward.domain.models import (
    ActionStatus,
    ApprovalStatus,
    Decision,
    Finding,
    Hold,
    LadderState,
    Level,
    Notice,
    Owner,
    RuleAction,
    Workload,
    WorkloadKind,
)
from gpusteward.domain.records import (
    AuditNote,
    DailyAmounts,
    DailyKey,
    Mark,
    ShowbackAmounts,
    ShowbackKey,
    UsageAmounts,
    UsageKey,
)
from gpusteward.domain.store_ports import TickStore
from gpusteward.store.db import StateStore
from gpusteward.store.memory import MemoryStore

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)

# That both satisfy every port statically is checked in store/memory.py (tests are not under mypy).


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TickStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    url = (
        f"sqlite:///{tmp_path / 'state.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    s = StateStore(url)
    s.create_schema()
    yield s
    s.close()


def _decision(
    wid: str = "w1", key: str = "w1:e1:graceful-stop", level: Level = Level.GRACEFUL_STOP
) -> Decision:
    return Decision(
        wid,
        T0,
        level,
        "graceful-stop",
        "idle for 2 h",
        rule="idle",
        gpu_uuids=("g1", "g2"),
        idempotency_key=key,
    )


def _finding(wid: str | None = "w1", rule: str = "idle", minutes: float = 30.0, at: datetime = T0) -> Finding:
    return Finding(
        rule=rule,
        kind="idle",
        action=RuleAction.RECLAIM,
        at=at,
        gpu_uuids=("g1",),
        workload_id=wid,
        evidence={"util": {"g1": 0.5}},
        wasted_minutes=minutes,
        wasted_gpu_hours=minutes / 60,
        wasted_cost=minutes / 60 * 2.0,
        message="idle",
    )


def _events(store: TickStore) -> list[str]:
    return [r.event for r in store.audit_log(limit=1000)]


# -- ladders ----------------------------------------------------------------------------------
def test_ladders_are_saved_and_cleared_per_mode(store: TickStore) -> None:
    a = LadderState("w1", "inc1", "idle", T0, T0 + MIN, step="warn-1", step_at=T0 + MIN)
    b = LadderState("w2", "inc2", "idle", T0, T0)
    store.update_ladders([a, b], (), dry_run=False)
    store.update_ladders([a], (), dry_run=True)
    assert store.load_ladders(False) == {"w1": a, "w2": b}
    assert list(store.load_ladders(False)) == ["w1", "w2"]

    moved = LadderState("w1", "inc1", "idle", T0, T0 + 2 * MIN, step="warn-2", step_at=T0 + 2 * MIN)
    store.update_ladders([moved], ["w2"], dry_run=False)
    assert store.load_ladders(False) == {"w1": moved}
    assert store.load_ladders(True) == {"w1": a}  # a dry run's ladder is its own


# -- the action journal -----------------------------------------------------------------------
def test_an_idempotency_key_plans_one_action_per_mode(store: TickStore) -> None:
    first = store.plan_action(_decision(), dry_run=False, at=T0)
    assert first is not None
    assert (first.status, first.attempts, first.gpu_uuids, first.level) == (
        ActionStatus.PLANNED,
        0,
        ("g1", "g2"),
        Level.GRACEFUL_STOP,
    )
    assert store.plan_action(_decision(), dry_run=False, at=T0 + MIN) is None
    dry = store.plan_action(_decision(), dry_run=True, at=T0)
    assert dry is not None
    assert dry.id != first.id
    with pytest.raises(ValueError, match="no idempotency key"):
        store.plan_action(_decision(key=""), dry_run=False, at=T0)


def test_a_failed_action_comes_back_only_after_its_backoff(store: TickStore) -> None:
    a = store.plan_action(_decision(), dry_run=False, at=T0)
    assert a is not None
    store.start_action(a.id, T0)
    store.finish_action(a.id, ActionStatus.FAILED, "refused", T0)
    assert store.plan_action(_decision(), dry_run=False, at=T0 + MIN / 2) is None
    assert store.retries_due(T0 + MIN / 2, dry_run=False) == []
    again = store.plan_action(_decision(), dry_run=False, at=T0 + MIN)
    assert again is not None
    assert again.id == a.id
    assert again.status is ActionStatus.FAILED
    assert [r.id for r in store.retries_due(T0 + MIN, dry_run=False)] == [a.id]
    assert store.start_action(a.id, T0 + MIN).attempts == 2
    store.finish_action(a.id, ActionStatus.FAILED, "refused again", T0 + MIN)
    # Second failure: two minutes.
    assert store.retries_due(T0 + 2 * MIN, dry_run=False) == []
    assert len(store.retries_due(T0 + 3 * MIN, dry_run=False)) == 1


def test_action_states_move_only_forward_with_their_audit(store: TickStore) -> None:
    a = store.plan_action(_decision(), dry_run=False, at=T0)
    assert a is not None
    with pytest.raises(StoreError, match="not executing"):
        store.finish_action(a.id, ActionStatus.SUCCEEDED, "", T0)
    with pytest.raises(ValueError, match="finishes as"):
        store.finish_action(a.id, ActionStatus.EXECUTING, "", T0)
    with pytest.raises(StoreError, match="no such action"):
        store.start_action(a.id + 100, T0)
    assert store.unfinished_actions(dry_run=False) == [a]

    started = store.start_action(a.id, T0 + MIN, audit=AuditNote("action.start", {"key": a.idempotency_key}))
    assert (started.status, started.attempts, started.updated_at) == (ActionStatus.EXECUTING, 1, T0 + MIN)
    pended = store.pend_action(a.id, T0 + 5 * MIN, "signalled", T0 + MIN, audit=AuditNote("action.pending"))
    assert pended.due_at == T0 + 5 * MIN
    assert pended.detail == "signalled"
    # A stop under way is not a crash leftover; its follow-up comes when due.
    assert store.unfinished_actions(dry_run=False) == []
    assert store.followups_due(T0 + 4 * MIN, dry_run=False) == []
    assert [f.id for f in store.followups_due(T0 + 5 * MIN, dry_run=False)] == [a.id]

    done = store.finish_action(
        a.id, ActionStatus.SUCCEEDED, "x" * 5000, T0 + 5 * MIN, audit=AuditNote("action.succeeded")
    )
    assert done.status is ActionStatus.SUCCEEDED
    assert len(done.detail) == 4000
    with pytest.raises(StoreError, match="it is succeeded"):
        store.start_action(a.id, T0 + 6 * MIN)
    assert _events(store) == ["action.start", "action.pending", "action.succeeded"]
    assert all(r.workload_id == "w1" for r in store.audit_log())
    assert store.followups_due(T0 + 9 * MIN, dry_run=False) == []


def test_counts_and_listings_of_actions(store: TickStore) -> None:
    stop = store.plan_action(_decision("w1", "k1"), dry_run=False, at=T0)
    skipped = store.plan_action(_decision("w2", "k2"), dry_run=False, at=T0)
    notice = store.plan_action(_decision("w3", "k3", Level.NOTIFY), dry_run=False, at=T0)
    dry = store.plan_action(_decision("w1", "k4"), dry_run=True, at=T0)
    assert stop
    assert skipped
    assert notice
    assert dry
    store.finish_action(skipped.id, ActionStatus.SKIPPED, "pre-flight", T0)
    store.finish_action(dry.id, ActionStatus.SKIPPED, "dry-run", T0)
    # Real skipped actions touched nothing; dry-run ones (all skipped) are what would have run.
    assert store.count_actions_since(T0) == (1, 2)
    assert store.count_actions_since(T0, dry_run=True) == (1, 2)
    assert store.count_actions_since(T0, Level.NOTIFY) == (2, 4)
    assert store.count_actions_since(T0 + MIN) == (0, 0)
    assert [a.idempotency_key for a in store.actions()] == ["k1", "k2", "k3", "k4"]
    assert [a.idempotency_key for a in store.actions(limit=2)] == ["k3", "k4"]
    assert [a.idempotency_key for a in store.actions(workload_id="w1")] == ["k1", "k4"]


# -- episodes and decisions -------------------------------------------------------------------
def test_finding_episodes_open_refresh_and_close(store: TickStore) -> None:
    store.record_findings([_finding(), _finding(None, "stray")], T0)
    assert store.open_episode_keys() == {("w1", "idle")}  # waste no workload holds has no key
    store.record_findings([_finding(minutes=31.0, at=T0 + 10 * MIN)], T0 + 10 * MIN)
    [e] = store.findings_for("w1")
    # A window sees 31 minutes; the episode has lasted 40.
    assert (e.first_seen_at, e.last_seen_at, e.ended_at) == (T0, T0 + 10 * MIN, None)
    assert e.finding.wasted_minutes == pytest.approx(40.0)
    assert e.finding.wasted_cost == pytest.approx(40 / 60 * 2.0)
    assert e.finding.at == T0 + 10 * MIN
    assert e.finding.evidence == {"util": {"g1": 0.5}}
    assert len(store.open_findings()) == 2
    # A refresh takes everything the latest finding saw: its GPUs, evidence, message, kind, action.
    later = replace(
        _finding(at=T0 + 11 * MIN),
        gpu_uuids=("g1", "g2"),
        evidence={"util": {"g1": 0.25, "g2": 1.0}, "mem": {"g1": 2.0}},
        message="idle on two",
        kind="stalled",
        action=RuleAction.ADVISE,
    )
    store.record_findings([later], T0 + 11 * MIN)
    [e] = store.findings_for("w1")
    assert (e.first_seen_at, e.last_seen_at) == (T0, T0 + 11 * MIN)
    assert (e.finding.workload_id, e.finding.rule) == ("w1", "idle")
    assert e.finding.gpu_uuids == ("g1", "g2")
    assert e.finding.evidence == {"util": {"g1": 0.25, "g2": 1.0}, "mem": {"g1": 2.0}}
    assert (e.finding.message, e.finding.kind) == ("idle on two", "stalled")
    assert e.finding.action is RuleAction.ADVISE
    assert e.finding.wasted_minutes == pytest.approx(41.0)  # 40 stored, one minute since
    assert e.finding.wasted_gpu_hours == pytest.approx(41 / 60 * 2)

    store.close_findings([("w1", "idle")], T0 + 20 * MIN)
    assert store.open_episode_keys() == set()
    store.record_findings([_finding(at=T0 + 30 * MIN)], T0 + 30 * MIN)
    first, second = store.findings_for("w1")
    assert first.ended_at == T0 + 20 * MIN
    assert second.first_seen_at == T0 + 30 * MIN
    assert second.to_dict()["first_seen_at"] == T0 + 30 * MIN


def test_decisions_are_stored_when_they_change(store: TickStore) -> None:
    warn = Decision("w1", T0, Level.NOTIFY, "warn-1", "idle", rule="idle", idempotency_key="k")
    held = Decision("w1", T0 + MIN, Level.NOTIFY, "warn-1", "idle", hold=Hold.PROTECTED)
    assert store.record_decisions([warn]) == 1
    assert store.record_decisions([warn]) == 0
    assert store.record_decisions([held, warn]) == 2
    assert store.decisions_for("w1") == [warn, held, warn]
    assert store.decisions_for("w1", limit=1) == [warn]


# -- notices, controls, workloads, the ledger ------------------------------------------------------
def test_notices_since_and_sent(store: TickStore) -> None:
    owner = Owner("ana", "nlp")
    store.record_notice(Notice(T0, "w1", owner, "Notice", "body", Level.NOTIFY, "k1"), sent=False)
    store.record_notice(Notice(T0 + MIN, "w2", None, "Approval", "body", Level.FORCE, "k2"), sent=True)
    assert not store.notice_sent("k1")
    assert store.notice_sent("k2")
    assert [r.notice.dedup_key for r in store.notices_since(T0 + MIN)] == ["k2"]
    [record] = store.notices("w1")
    assert record.notice.owner == owner
    assert not record.sent
    assert record.to_dict()["level"] == "L1"
    assert record.to_dict()["owner"] == {
        "user": "ana",
        "team": "nlp",
        "contact": None,
    }


def test_pause_approvals_and_snoozes(store: TickStore) -> None:
    store.set_paused(True, by="ops", reason="incident", at=T0)
    assert store.is_paused()
    store.set_paused(False, by="ops", reason="", at=T0)
    assert not store.is_paused()

    ttl = timedelta(hours=1)
    asked = store.request_approval(_decision(), dry_run=False, at=T0, ttl=ttl)
    assert store.request_approval(_decision(), dry_run=False, at=T0 + MIN, ttl=ttl) == asked
    with pytest.raises(ControlError, match="not approved"):
        store.use_approval(asked.id, T0)
    approved = store.decide_approval(asked.id, approve=True, by="lead", reason="ok", at=T0 + MIN)
    assert (approved.status, approved.decided_by, approved.decided_at) == (
        ApprovalStatus.APPROVED,
        "lead",
        T0 + MIN,
    )
    assert store.use_approval(asked.id, T0 + 2 * MIN).status is ApprovalStatus.USED

    # A second request for the same step after the first lapsed: counted per action key.
    again = store.request_approval(_decision(key="w1:e1:graceful-stop~r2"), dry_run=False, at=T0, ttl=ttl)
    assert store.latest_approvals(["w1"], dry_run=False) == {"w1:e1:graceful-stop": (again, 2)}
    [expired] = store.expire_approvals(T0 + ttl)
    assert expired.id == again.id
    assert expired.status is ApprovalStatus.EXPIRED
    with pytest.raises(ControlError, match="is expired"):
        store.decide_approval(again.id, approve=True, by="lead", reason="", at=T0 + ttl)
    assert [a.id for a in store.approvals(ApprovalStatus.USED)] == [asked.id]

    first = store.snooze("w1", until=T0 + ttl, by="ana", reason="demo", at=T0)
    second = store.snooze("w1", until=T0 + 2 * ttl, by="ana", reason="longer", at=T0 + MIN)
    assert store.active_snoozes(T0 + 2 * MIN) == {"w1": second}
    assert first.id != second.id
    assert _events(store) == [
        "paused",
        "resumed",
        "approval.requested",
        "approval.approved",
        "approval.requested",
        "approval.expired",
        "snooze.set",
        "snooze.set",
    ]
    assert store.audit_log(limit=1)[0].payload == {
        "until": (T0 + 2 * ttl).isoformat(),
        "by": "ana",
        "reason": "longer",
    }


def test_workload_snapshots_keep_when_first_seen(store: TickStore) -> None:
    w = Workload("w1", WorkloadKind.JOB, "train", Owner("ana", "nlp"), 1, ("g1",), T0, source="sim")
    store.remember_workloads([w], T0)
    store.remember_workloads(
        [Workload("w1", WorkloadKind.JOB, "train-2", w.owner, 1, ("g1", "g2"), T0)], T0 + MIN
    )
    info = store.workload_info("w1")
    assert info is not None
    assert (info.name, info.gpu_uuids, info.first_seen_at, info.last_seen_at) == (
        "train-2",
        ("g1", "g2"),
        T0,
        T0 + MIN,
    )
    assert info.to_dict()["user"] == "ana"
    assert store.workload_info("nope") is None


def test_ledger_adds_amounts_and_keeps_marks(store: TickStore) -> None:
    key = DailyKey("2026-03-02", "EUR", "ana", "nlp", "idle")
    usage = {UsageKey("2026-03-02", "w1"): UsageAmounts("ana", "nlp", 2, 2, 1.0, 0.5)}
    store.ledger.add({key: DailyAmounts(1.0, 2.0)}, usage, [Mark("waste:g1", T0, {"x": float("nan")})])
    store.ledger.add({key: DailyAmounts(1.0, 2.0)}, usage, [Mark("saved:w1", T0 + MIN)], ["waste:g1"])
    assert store.ledger.marks() == {"saved:w1": Mark("saved:w1", T0 + MIN, {})}
    # Usage: hours add up, the GPU counts keep their largest, the owner is the newest.
    store.ledger.add({}, {UsageKey("2026-03-02", "w1"): UsageAmounts("bo", "cv", 1, 4, 0.25, 0.125, 3)})
    read = store.ledger.usage  # the SQL ledger reads days; the in-memory one is its dict
    rows = {r.key: r.amounts for r in read(date(2026, 3, 2), date(2026, 3, 3))} if callable(read) else read
    assert rows == {UsageKey("2026-03-02", "w1"): UsageAmounts("bo", "cv", 2, 4, 2.25, 1.125, 3)}
    store.ledger.add({}, {}, [Mark("waste:g1", T0, {"x": float("nan")})])
    assert store.ledger.marks()["waste:g1"].data == {"x": None}  # JSON has no NaN


def test_showback_adds_up_and_a_closed_month_is_never_rewritten(store: TickStore) -> None:
    feb = ShowbackKey("2026-02-27", "vision", "alice", "NVIDIA H100", "on-demand", "USD")
    mar = ShowbackKey("2026-03-02", "vision", "alice", "NVIDIA H100", "on-demand", "USD")
    store.ledger.add({}, {}, showback={feb: ShowbackAmounts(2.0, 1.0, 0.5, 0.0, 6.0, 1.4, 0.28)})
    store.ledger.add({}, {}, showback={feb: ShowbackAmounts(1.0, 0.5, 0.0, 0.25, 3.0)}, late_day=mar.day)
    [row] = store.ledger.showback(date(2026, 2, 1), date(2026, 3, 1))
    assert row.amounts == ShowbackAmounts(3.0, 1.5, 0.5, 0.25, 9.0, 1.4, 0.28)

    assert store.ledger.close_month("2026-02", T0) is True
    assert store.ledger.close_month("2026-02", T0 + MIN) is False
    assert store.ledger.closed_months() == {"2026-02": T0}
    # A late amount for February lands on the day it arrives; February stays as it was closed.
    store.ledger.add(
        {}, {}, showback={feb: ShowbackAmounts(held_gpu_hours=4.0, spend=12.0)}, late_day=mar.day
    )
    assert [r.amounts for r in store.ledger.showback(date(2026, 2, 1), date(2026, 3, 1))] == [row.amounts]
    [late] = store.ledger.showback(date(2026, 3, 1), date(2026, 4, 1), team="vision")
    assert (late.key, late.amounts) == (mar, ShowbackAmounts(held_gpu_hours=4.0, spend=12.0))
    assert store.ledger.showback(date(2026, 3, 1), date(2026, 4, 1), team="nlp") == []
