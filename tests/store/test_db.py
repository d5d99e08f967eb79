from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.exc import SQLAlchemyError

from gpusteward.domain.errors import StoreError
from gpusteward.domain.models import (
    ActionStatus,
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
from gpusteward.store.db import StateStore

T0 = datetime(2025, 3, 4, 10, 0, tzinfo=UTC)


def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'state.db'}"


def decision(
    wid: str = "job-1",
    step: str = "graceful-stop",
    level: Level = Level.GRACEFUL_STOP,
    hold: Hold = Hold.NONE,
    at: datetime = T0,
    gpus: tuple[str, ...] = ("GPU-0", "GPU-1"),
) -> Decision:
    key = f"{wid}:1000:1000:{step}" if hold is Hold.NONE and level is not Level.NONE else ""
    return Decision(wid, at, level, step, "because", hold, "idle-gpu", gpus, key)


def finding(wid: str | None = "job-1", rule: str = "idle-gpu", cost: float = 1.0) -> Finding:
    return Finding(
        rule=rule,
        kind="idle",
        action=RuleAction.RECLAIM,
        at=T0,
        gpu_uuids=("GPU-0",),
        workload_id=wid,
        evidence={"max(gpu_util_pct)": {"GPU-0": 0.0}, "mean(power_w)": {"GPU-0": math.nan}},
        wasted_minutes=30,
        wasted_gpu_hours=0.5,
        wasted_cost=cost,
        message="idle",
    )


def workload(wid: str = "job-1", name: str = "train-llm", gpus: tuple[str, ...] = ("GPU-0",)) -> Workload:
    return Workload(
        id=wid,
        kind=WorkloadKind.JOB,
        name=name,
        owner=Owner("alice", "nlp", "alice@example.org"),
        gpus_requested=len(gpus),
        gpu_uuids=gpus,
        started_at=T0 - timedelta(hours=1),
        source="sim",
        labels={"app": "x"},
    )


# -- actions -------------------------------------------------------------------------------------


def test_second_plan_of_the_same_decision_returns_none(store: StateStore) -> None:
    first = store.plan_action(decision(), dry_run=False, at=T0)
    assert first is not None
    assert (first.status, first.attempts, first.gpu_uuids) == (ActionStatus.PLANNED, 0, ("GPU-0", "GPU-1"))
    assert store.plan_action(decision(), dry_run=False, at=T0 + timedelta(minutes=5)) is None
    store.start_action(first.id, T0)
    assert store.plan_action(decision(), dry_run=False, at=T0 + timedelta(hours=1)) is None  # executing
    store.finish_action(first.id, ActionStatus.SUCCEEDED, "stopped", T0)
    assert store.plan_action(decision(), dry_run=False, at=T0 + timedelta(hours=1)) is None
    assert len(store.actions()) == 1


def test_a_replica_that_loses_the_race_for_a_key_gets_none(store: StateStore) -> None:
    rival = StateStore(store._engine.url.render_as_string(hide_password=False))
    won: list[object] = []

    def rival_plans_first(conn: object, cursor: object, statement: str, *args: object) -> None:
        # Just before our INSERT runs, another replica plans and commits the same key.
        if statement.startswith("INSERT INTO actions") and not won:
            won.append(rival.plan_action(decision(), dry_run=False, at=T0))

    event.listen(store._engine, "before_cursor_execute", rival_plans_first)
    assert store.plan_action(decision(), dry_run=False, at=T0) is None
    assert won[0] is not None
    assert len(store.actions()) == 1
    rival.close()


def test_dry_run_and_real_actions_have_separate_keys(store: StateStore) -> None:
    assert store.plan_action(decision(), dry_run=True, at=T0) is not None
    assert store.plan_action(decision(), dry_run=False, at=T0) is not None
    assert store.plan_action(decision(), dry_run=True, at=T0) is None


def test_failed_action_is_retried_only_after_exponential_backoff(store: StateStore) -> None:
    action = store.plan_action(decision(), dry_run=False, at=T0)
    assert action is not None
    now = T0
    for expected_minutes in (1, 2, 4, 8, 16, 30, 30):
        store.start_action(action.id, now)
        store.finish_action(action.id, ActionStatus.FAILED, "timeout", now)
        wait = timedelta(minutes=expected_minutes)
        assert store.plan_action(decision(), dry_run=False, at=now + wait - timedelta(seconds=1)) is None
        retry = store.plan_action(decision(), dry_run=False, at=now + wait)
        assert retry is not None
        assert (retry.id, retry.status) == (action.id, ActionStatus.FAILED)
        now += wait
    assert store.retries_due(now, dry_run=False) == [retry]
    assert store.retries_due(now - timedelta(seconds=1), dry_run=False) == []
    assert store.retries_due(now, dry_run=True) == []
    assert store.start_action(action.id, now).attempts == 8
    assert store.retries_due(now + timedelta(days=1), dry_run=False) == []


def test_action_status_machine_refuses_illegal_moves(store: StateStore) -> None:
    action = store.plan_action(decision(), dry_run=False, at=T0)
    assert action is not None
    with pytest.raises(StoreError, match="it is planned"):
        store.finish_action(action.id, ActionStatus.SUCCEEDED, "", T0)
    with pytest.raises(ValueError, match="finishes as"):
        store.finish_action(action.id, ActionStatus.EXECUTING, "", T0)
    skipped = store.finish_action(action.id, ActionStatus.SKIPPED, "pre-flight: busy again", T0)
    assert (skipped.status, skipped.detail) == (ActionStatus.SKIPPED, "pre-flight: busy again")
    with pytest.raises(StoreError, match="it is skipped"):
        store.start_action(action.id, T0)
    with pytest.raises(StoreError, match="no such action"):
        store.start_action(999, T0)


def test_plan_refuses_a_decision_that_does_not_act(store: StateStore) -> None:
    with pytest.raises(ValueError, match="no idempotency key"):
        store.plan_action(decision(level=Level.NONE, step=""), dry_run=False, at=T0)


def test_count_actions_since_counts_real_stops_and_their_gpus(store: StateStore) -> None:
    def plan(
        wid: str, *, dry_run: bool = False, level: Level = Level.GRACEFUL_STOP, at: datetime = T0
    ) -> int:
        a = store.plan_action(decision(wid, level=level, at=at), dry_run=dry_run, at=at)
        assert a is not None
        return a.id

    plan("a")
    store.start_action(plan("b"), T0)
    plan("c", dry_run=True)
    plan("d", level=Level.NOTIFY)
    plan("e", at=T0 - timedelta(hours=2))
    store.finish_action(plan("f"), ActionStatus.SKIPPED, "gone", T0)
    assert store.count_actions_since(T0 - timedelta(hours=1)) == (2, 4)
    assert store.count_actions_since(T0 - timedelta(hours=1), min_level=Level.NOTIFY) == (3, 6)
    assert store.count_actions_since(T0 - timedelta(hours=1), dry_run=True) == (1, 2)
    assert store.actions_by_level(dry_run=False) == {"L1": 1, "L2": 4, "L3": 0, "L4": 0}
    assert store.actions_by_level() == {"L1": 1, "L2": 5, "L3": 0, "L4": 0}
    assert [a.workload_id for a in store.actions(limit=2)] == ["e", "f"]
    assert [a.workload_id for a in store.actions(workload_id="c")] == ["c"]


# -- decisions -------------------------------------------------------------------------------------


def test_decisions_are_stored_only_when_level_step_or_hold_changes(store: StateStore) -> None:
    waiting = decision(level=Level.NONE, step="", hold=Hold.WAITING)
    tick = [decision(level=Level.NOTIFY, step="warn-1"), decision("job-2", hold=Hold.BUDGET)]
    assert store.record_decisions(tick) == 2
    assert store.record_decisions([waiting, decision("job-2", hold=Hold.BUDGET)]) == 1
    assert store.record_decisions([waiting, waiting]) == 0
    assert store.record_decisions([decision(level=Level.NOTIFY, step="warn-2"), waiting]) == 2
    steps = [(d.step, d.hold) for d in store.decisions_for("job-1")]
    assert steps == [("warn-1", Hold.NONE), ("", Hold.WAITING), ("warn-2", Hold.NONE), ("", Hold.WAITING)]
    assert store.decisions_for("job-1")[0].idempotency_key == "job-1:1000:1000:warn-1"
    assert len(store.decisions_for("job-2")) == 1


# -- ladders ----------------------------------------------------------------------------------------


def test_ladders_round_trip_as_aware_utc_and_are_kept_per_mode(store: StateStore) -> None:
    plus2 = timezone(timedelta(hours=2))
    seen = datetime(2025, 3, 4, 12, 0, 30, 123456, tzinfo=plus2)
    state = LadderState("job-1", "1000", "idle-gpu", seen, seen + timedelta(minutes=5), "warn-1", seen, seen)
    store.save_ladders([state, LadderState("job-2", "7", "idle-gpu", seen, seen)], dry_run=False)
    store.save_ladders([LadderState("job-3", "7", "idle-gpu", seen, seen)], dry_run=True)
    loaded = store.load_ladders(dry_run=False)
    assert loaded["job-1"] == state
    assert loaded["job-1"].first_seen_at.tzinfo is UTC
    assert loaded["job-1"].first_seen_at.hour == 10
    assert loaded["job-2"].step_at is None
    assert set(store.load_ladders(dry_run=True)) == {"job-3"}
    moved = LadderState("job-1", "1000", "idle-gpu", seen, seen, "warn-2", seen, seen)
    store.update_ladders([moved], ["job-2"], dry_run=False)
    assert store.load_ladders(dry_run=False) == {"job-1": moved}
    store.clear_ladders(["job-1"], dry_run=False)
    assert store.load_ladders(dry_run=False) == {}
    assert set(store.load_ladders(dry_run=True)) == {"job-3"}


def test_naive_datetimes_are_refused_as_store_errors(store: StateStore) -> None:
    with pytest.raises(StoreError):
        store.audit("tick", datetime(2025, 1, 1))  # naive on purpose


# -- pause and audit --------------------------------------------------------------------------------


def test_paused_flag_persists_across_store_instances_on_one_file(tmp_path: Path) -> None:
    first = StateStore(url(tmp_path))
    first.create_schema()
    assert first.is_paused() is False
    first.set_paused(True, by="ops", reason="incident 42", at=T0)
    first.close()
    second = StateStore(url(tmp_path))
    assert second.is_paused() is True
    state = second.pause_state()
    assert (state.by, state.reason, state.at) == ("ops", "incident 42", T0)
    second.set_paused(False, by="ops", reason="resolved", at=T0 + timedelta(minutes=1))
    assert second.is_paused() is False
    assert [r.event for r in second.audit_log()] == ["paused", "resumed"]
    assert (tmp_path / "state.db-wal").exists()  # WAL journal, so readers do not block the loop
    second.close()


def test_audit_log_keeps_append_order_and_returns_the_latest_oldest_first(store: StateStore) -> None:
    # Timestamps out of order on purpose: the log's order is the order of appending.
    for i, minute in enumerate([5, 1, 3, 2, 4]):
        store.audit("decision", T0 + timedelta(minutes=minute), "job-1" if i % 2 == 0 else None, n=i, at_=T0)
    log = store.audit_log()
    assert [r.payload["n"] for r in log] == [0, 1, 2, 3, 4]
    assert log[0].payload["at_"] == str(T0)
    assert [r.payload["n"] for r in store.audit_log(limit=2)] == [3, 4]
    assert [r.payload["n"] for r in store.audit_log(workload_id="job-1")] == [0, 2, 4]
    assert [r.id for r in log] == sorted(r.id for r in log)


# -- findings, notices, workloads ------------------------------------------------------------------


def test_finding_episodes_open_refresh_and_close(store: StateStore) -> None:
    store.record_findings([finding(), finding(rule="low-util"), finding(None)], T0)
    store.record_findings([finding(cost=2.0)], T0 + timedelta(minutes=1))
    open_ = store.open_findings()
    assert len(open_) == 3
    ep = store.findings_for("job-1")[0]
    assert (ep.first_seen_at, ep.last_seen_at) == (T0, T0 + timedelta(minutes=1))
    # The episode's waste goes on past the finding's window: 30 min seen + 1 min since, at the new price.
    assert ep.finding.wasted_minutes == 31
    assert ep.finding.wasted_cost == pytest.approx(31 / 60 * 4.0)
    assert ep.finding.evidence["max(gpu_util_pct)"]["GPU-0"] == 0.0
    assert math.isnan(ep.finding.evidence["mean(power_w)"]["GPU-0"])
    assert ep.to_dict()["evidence"]["mean(power_w)"] == {"GPU-0": None}
    assert ep.to_dict()["first_seen_at"] == T0
    assert store.open_episode_keys() == {("job-1", "idle-gpu"), ("job-1", "low-util")}
    store.close_findings([("job-1", "idle-gpu"), ("job-1", "low-util")], T0 + timedelta(minutes=2))
    assert [e.finding.workload_id for e in store.open_findings()] == [None]
    assert store.open_episode_keys() == set()
    store.record_findings([finding()], T0 + timedelta(minutes=3))
    assert len(store.all_findings()) == 4
    episodes = store.findings_for("job-1")
    assert [e.ended_at for e in episodes] == [T0 + timedelta(minutes=2), T0 + timedelta(minutes=2), None]


def test_notices_round_trip(store: StateStore) -> None:
    owner = Owner("alice", "nlp", "alice@example.org")
    store.record_notice(Notice(T0, "job-1", owner, "idle GPUs", "body", Level.NOTIFY, "k1"), sent=True)
    store.record_notice(Notice(T0, "job-2", None, "admins", "body"), sent=False)
    records = store.notices()
    assert [(r.notice.workload_id, r.sent) for r in records] == [("job-1", True), ("job-2", False)]
    assert records[0].notice.owner == owner
    assert records[1].notice.owner is None
    assert records[0].to_dict()["owner"] == {"user": "alice", "team": "nlp", "contact": "alice@example.org"}
    assert [r.notice.subject for r in store.notices("job-2")] == ["admins"]


def test_workload_snapshots_are_upserted_and_found(store: StateStore) -> None:
    store.remember_workloads([workload(), workload("job-12", "eval")], T0)
    store.remember_workloads([workload(gpus=("GPU-0", "GPU-1"))], T0 + timedelta(minutes=1))
    info = store.workload_info("job-1")
    assert info is not None
    assert (info.gpu_uuids, info.first_seen_at, info.last_seen_at) == (
        ("GPU-0", "GPU-1"),
        T0,
        T0 + timedelta(minutes=1),
    )
    assert (info.owner.user, info.labels, info.started_at) == ("alice", {"app": "x"}, T0 - timedelta(hours=1))
    assert info.to_dict()["user"] == "alice"
    store.remember_workloads([workload("pod-x", "job-1-helper")], T0 + timedelta(minutes=2))
    assert [w.id for w in store.find_workloads("JOB-1")] == ["job-1", "job-12", "pod-x"]
    assert [w.id for w in store.find_workloads("eva")] == ["job-12"]
    assert store.find_workloads("%") == []
    assert store.workload_info("nope") is None


def test_sqlalchemy_errors_become_store_errors_with_the_cause(tmp_path: Path) -> None:
    s = StateStore(url(tmp_path))  # no create_schema: every table is missing
    with pytest.raises(StoreError, match="load ladders") as err:
        s.load_ladders(dry_run=False)
    assert isinstance(err.value.__cause__, SQLAlchemyError)
    s.close()
    with pytest.raises(StoreError, match="cannot open store"):
        StateStore("nosuchdialect://x")
    assert s.url == url(tmp_path)


def test_in_memory_store_shares_one_database(tmp_path: Path) -> None:
    s = StateStore("sqlite://")
    s.create_schema()
    s.audit("hello", T0)
    assert [r.event for r in s.audit_log()] == ["hello"]
    s.close()
