"""The whole loop on the small simulated cluster: what it stops, what it never stops, and why."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import datetime

from gpusteward.domain.errors import SourceError
from gpusteward.domain.models import ActionStatus, Hold, Level, Observation
from gpusteward.integrations.sim import SimCluster, SimExecutor
from gpusteward.integrations.sim.behaviours import Behaviour
from gpusteward.store.db import StateStore


def _ids(cluster: SimCluster, *behaviours: Behaviour, protected: bool = False) -> set[str]:
    return {t.workload_id for t in cluster.truths() if t.behaviour in behaviours and t.protected == protected}


def _stopped(store: StateStore) -> set[str]:
    return {
        a.workload_id
        for a in store.actions(limit=10_000)
        if a.level >= Level.GRACEFUL_STOP and a.status is ActionStatus.SUCCEEDED
    }


def test_small_cluster_stops_waste_and_nothing_else(make_steward, run_for):
    steward, integration, clock, notifier = make_steward()
    cluster = integration.ground_truth
    run_for(steward, clock, minutes=4 * 60)

    wasteful = _ids(cluster, Behaviour.ZOMBIE, Behaviour.IDLE, Behaviour.NOTEBOOK)
    productive = _ids(cluster, Behaviour.TRAINING, Behaviour.LOADING)
    protected = {t.workload_id for t in cluster.truths() if t.protected}
    assert len(wasteful) == 3
    assert productive
    assert protected

    stopped = _stopped(steward.store)
    assert stopped == wasteful
    assert not stopped & (productive | protected)
    assert cluster.score(clock.now()).false_stops == ()
    # Every stopped workload actually ended in the cluster.
    assert all(cluster.ending(w) is not None for w in wasteful)

    # The owner heard twice before the stop, and was told about the stop itself.
    for w in wasteful:
        subjects = [n.subject for n in notifier.sent if n.workload_id == w]
        assert len(subjects) == 3, subjects
        assert subjects[0].startswith("Notice")
        assert subjects[2].startswith("Stopping")
    # The protected zombie was seen and warned (protection stops actions, not information), and
    # its stop held for a stated reason.
    for w in protected:
        decisions = steward.store.decisions_for(w)
        assert decisions
        assert all(d.hold is Hold.PROTECTED for d in decisions if d.level >= Level.GRACEFUL_STOP)
        assert any(d.hold is Hold.PROTECTED for d in decisions)
        subjects = [n.subject for n in notifier.sent if n.workload_id == w]
        assert len(subjects) == 2, subjects
        assert all(s.startswith("Notice") for s in subjects)


def test_ladder_timing_is_warn_warn_then_stop(make_steward, run_for):
    steward, integration, clock, _ = make_steward()
    run_for(steward, clock, minutes=3 * 60)
    (zombie,) = _ids(integration.ground_truth, Behaviour.ZOMBIE)
    steps = {a.step: a.created_at for a in steward.store.actions(limit=100, workload_id=zombie)}
    assert list(steps) == ["warn-1", "warn-2", "graceful-stop"]
    assert (steps["warn-2"] - steps["warn-1"]).total_seconds() == 15 * 60
    assert (steps["graceful-stop"] - steps["warn-1"]).total_seconds() == 30 * 60


def test_pause_stops_every_action_and_resume_continues(make_steward, run_for):
    steward, integration, clock, notifier = make_steward()
    steward.store.set_paused(True, by="test", reason="maintenance", at=clock.now())
    reports = run_for(steward, clock, minutes=3 * 60)
    assert steward.store.actions(limit=100) == []
    assert notifier.sent == []
    assert any(r.findings for r in reports), "waste was seen while paused"
    held = [d for r in reports for d in r.decisions if d.level > Level.NONE]
    assert held
    assert all(d.hold is Hold.PAUSED for d in held)

    steward.store.set_paused(False, by="test", reason="done", at=clock.now())
    run_for(steward, clock, minutes=90)
    assert _stopped(steward.store) == _ids(
        integration.ground_truth, Behaviour.ZOMBIE, Behaviour.IDLE, Behaviour.NOTEBOOK
    )


def test_dry_run_touches_nothing_but_records_what_it_would_do(make_steward, settings_for, run_for):
    steward, integration, clock, notifier = make_steward(settings_for(mode="dry-run"))
    run_for(steward, clock, minutes=3 * 60)
    actions = steward.store.actions(limit=1000)
    assert actions
    assert all(a.dry_run and a.status is ActionStatus.SKIPPED for a in actions)
    assert {a.step for a in actions} >= {"warn-1", "warn-2", "graceful-stop"}
    assert notifier.sent == []
    assert integration.ground_truth.endings() == () or all(
        e.stop_at is None for e in integration.ground_truth.endings()
    )


def test_restart_mid_ladder_continues_without_duplicates(make_steward, settings_for, run_for):
    settings = settings_for()
    first, integration, clock, _ = make_steward(settings)
    run_for(first, clock, minutes=20)
    (zombie,) = _ids(integration.ground_truth, Behaviour.ZOMBIE)
    before = [a.step for a in first.store.actions(limit=100, workload_id=zombie)]
    assert before == ["warn-1"], "the restart must fall between the first warning and the stop"
    first.store.close()

    # A new process: new state-store connection, empty window, the same cluster going on.
    second, _, _, _ = make_steward(settings, clock=clock, integration=integration, backfill=False)
    run_for(second, clock, minutes=120)
    actions = second.store.actions(limit=1000)
    keys = [a.idempotency_key for a in actions]
    assert len(keys) == len(set(keys))
    steps = Counter((a.workload_id, a.step) for a in actions)
    assert steps[(zombie, "warn-1")] == 1
    assert steps[(zombie, "graceful-stop")] == 1
    assert zombie in _stopped(second.store)


def test_failed_action_is_recorded_and_retried_with_backoff(make_steward, settings_for, run_for):
    from gpusteward.integrations.sim import DEFAULT_START, SimClock
    from gpusteward.runtime.registry import build_integration

    settings = settings_for()
    clock = SimClock(DEFAULT_START)
    integration = build_integration(settings, clock)
    integration = dataclasses.replace(
        integration, executors=[SimExecutor(integration.ground_truth, fail_times=1)]
    )
    steward, _, _, _ = make_steward(settings, clock=clock, integration=integration)
    run_for(steward, clock, minutes=4 * 60)
    stops = [a for a in steward.store.actions(limit=1000) if a.step == "graceful-stop"]
    # One row per step and workload: the failure was retried in place, never duplicated.
    assert len({a.idempotency_key for a in stops}) == len(stops) == 3
    retried = [a for a in stops if a.attempts == 2]
    assert len(retried) == 1
    assert retried[0].status is ActionStatus.SUCCEEDED
    audit = [r.event for r in steward.store.audit_log(limit=1000, workload_id=retried[0].workload_id)]
    assert "action.failed" in audit
    assert audit.index("action.failed") < len(audit) - 1


class FlakySource:
    """The simulator, failing between two times: a Prometheus that went down."""

    def __init__(self, inner, down_from: datetime, down_until: datetime) -> None:
        self.inner, self.name = inner, "flaky"
        self.down_from, self.down_until = down_from, down_until

    def observe(self, now: datetime) -> Observation:
        if self.down_from <= now < self.down_until:
            raise SourceError("connection refused")
        return self.inner.observe(now)

    def close(self) -> None:
        self.inner.close()


def test_source_outage_never_leads_to_action_on_stale_data(make_steward, settings_for, run_for):
    from datetime import timedelta

    from gpusteward.integrations.sim import DEFAULT_START, SimClock
    from gpusteward.runtime.registry import build_integration

    settings = settings_for()
    clock = SimClock(DEFAULT_START)
    integration = build_integration(settings, clock)
    # Down from minute 35 (after the first warnings, before any stop) for an hour.
    down_from, down_until = DEFAULT_START + timedelta(minutes=35), DEFAULT_START + timedelta(minutes=95)
    integration = dataclasses.replace(
        integration, source=FlakySource(integration.source, down_from, down_until)
    )
    steward, _, _, _ = make_steward(settings, clock=clock, integration=integration)
    reports = run_for(steward, clock, minutes=4 * 60)

    stale_after = timedelta(seconds=settings.analysis.stale_after_seconds)
    outage = [r for r in reports if down_from + stale_after < r.at < down_until]
    assert outage
    assert all(not r.source_ok for r in outage)
    assert all(r.findings == () and r.actions == () for r in outage)
    assert all(any("failed" in e or "backing off" in e for e in r.errors) for r in outage)
    stops = [a for a in steward.store.actions(limit=1000) if a.level >= Level.GRACEFUL_STOP]
    # Data younger than stale_after_seconds still counts; nothing acts on anything older.
    assert all(not (down_from + stale_after < a.created_at < down_until) for a in stops)
    # The ladders froze through the outage: nobody was warned twice for one episode.
    warnings = Counter(a.workload_id for a in steward.store.actions(limit=1000) if a.step == "warn-1")
    assert warnings
    assert set(warnings.values()) == {1}
    # It recovered and finished the job after the outage.
    assert _stopped(steward.store) == _ids(
        integration.ground_truth, Behaviour.ZOMBIE, Behaviour.IDLE, Behaviour.NOTEBOOK
    )


def test_stale_gpu_freezes_the_ladder_and_is_never_acted_on(make_steward, run_for):
    steward, integration, clock, _ = make_steward()
    cluster = integration.ground_truth
    (zombie,) = _ids(cluster, Behaviour.ZOMBIE)
    run_for(steward, clock, minutes=12)
    assert [a.step for a in steward.store.actions(limit=10, workload_id=zombie)] == ["warn-1"]
    # Its exporter gets stuck: the same old sample again and again.
    workload = cluster.workload(zombie)
    assert workload is not None
    cluster.stale_gpus = set(workload.gpu_uuids)
    reports = run_for(steward, clock, minutes=3 * 60)
    assert zombie not in _stopped(steward.store)
    assert [a.step for a in steward.store.actions(limit=10, workload_id=zombie)] == ["warn-1"]
    assert all(r.stale_gpus >= 1 for r in reports[5:])
    last = steward.store.decisions_for(zombie)[-1]
    assert last.hold is Hold.STALE
    assert "No fresh data" in last.reason
    # The ladder was frozen, not forgotten.
    assert zombie in steward.store.load_ladders(dry_run=False)
    # The others were still handled.
    assert _stopped(steward.store) == _ids(cluster, Behaviour.IDLE, Behaviour.NOTEBOOK)


def test_missing_samples_cause_no_false_action(make_steward, settings_for, run_for):
    settings = settings_for(
        source={"name": "sim", "sim": {"scenario": "small", "history_hours": 0, "drop_rate": 0.1}}
    )
    steward, integration, clock, _ = make_steward(settings)
    run_for(steward, clock, minutes=5 * 60)
    score = integration.ground_truth.score(clock.now())
    assert score.false_stops == ()
    assert score.protected_stops == ()
    assert _stopped(steward.store) == _ids(
        integration.ground_truth, Behaviour.ZOMBIE, Behaviour.IDLE, Behaviour.NOTEBOOK
    )
