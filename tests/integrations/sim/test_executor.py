"""SimExecutor and SimSource against the small scenario, and scoring of what they did."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from gpusteward.domain.errors import ExecutionError, PreflightFailed
from gpusteward.domain.models import Decision, Level, Workload
from gpusteward.domain.ports import Executor, Source
from gpusteward.integrations.sim import Behaviour, EndHow, SimClock, SimCluster, SimExecutor, SimSource

S = timedelta(seconds=1)


def running(cluster: SimCluster, behaviour: Behaviour, *, protected: bool = False) -> Workload:
    (wid,) = [
        t.workload_id for t in cluster.truths() if t.behaviour is behaviour and t.protected is protected
    ]
    workload = cluster.workload(wid)
    assert workload is not None
    return workload


def decide(workload: Workload, level: Level, at: datetime) -> Decision:
    return Decision(
        workload.id, at, level, "graceful-stop" if level is Level.GRACEFUL_STOP else "force", "test"
    )


def kinds(cluster: SimCluster, wid: str) -> list[str]:
    return [e.kind for e in cluster.events if e.workload_id == wid]


@pytest.fixture
def cluster() -> SimCluster:
    c = SimCluster(scenario="small")
    c.advance_to(c.start + timedelta(hours=2))
    return c


def test_implements_the_ports(cluster: SimCluster) -> None:
    assert isinstance(SimExecutor(cluster), Executor)
    assert isinstance(SimSource(cluster), Source)
    assert SimSource(cluster).name == SimExecutor(cluster).name == "sim"
    with pytest.raises(ValueError, match="differs"):
        SimSource(cluster, name="other")


def test_source_advances_and_observes(cluster: SimCluster) -> None:
    source = SimSource(cluster)
    at = cluster.start + timedelta(hours=5)
    obs = source.observe(at)
    assert cluster.now == at
    assert obs == cluster.observe(at)
    source.close()


def test_supports_stops_of_its_own_workloads_only(cluster: SimCluster) -> None:
    executor = SimExecutor(cluster)
    zombie = running(cluster, Behaviour.ZOMBIE)
    assert executor.supports(zombie, Level.GRACEFUL_STOP)
    assert executor.supports(zombie, Level.FORCE)
    assert not executor.supports(zombie, Level.NOTIFY)
    assert not executor.supports(zombie, Level.INFRA)
    foreign = dataclasses.replace(zombie, ref={"sim_id": "job-9999"})
    assert not executor.supports(foreign, Level.FORCE)
    with pytest.raises(ExecutionError, match="unknown"):
        executor.execute(decide(foreign, Level.FORCE, cluster.now), foreign)


def test_graceful_stop_of_a_trainer_checkpoints_and_exits(cluster: SimCluster) -> None:
    executor = SimExecutor(cluster)
    train = running(cluster, Behaviour.TRAINING)
    t0 = cluster.now
    decision = decide(train, Level.GRACEFUL_STOP, t0)
    outcome = executor.execute(decision, train)
    assert outcome.ok
    assert not outcome.verified
    assert outcome.released_gpu_uuids == ()
    assert kinds(cluster, train.id) == ["start", "checkpoint"]
    assert executor.current(train) == train  # still writing its checkpoint

    cluster.observe(t0 + 30 * S)
    assert not executor.verify(decision, train)
    obs = cluster.observe(t0 + 61 * S)
    assert executor.verify(decision, train)
    assert executor.current(train) is None
    assert all(w.id != train.id for w in obs.workloads)
    freed = [s for s in obs.samples if s.gpu_uuid in train.gpu_uuids]
    assert [s.mem_used_mib for s in freed] == [0.0, 0.0]
    ending = cluster.ending(train.id)
    assert ending is not None
    assert (ending.how, ending.at, ending.stop_at) == (EndHow.CHECKPOINTED, t0 + 60 * S, t0)
    assert ending.productive_at_stop is True

    again = executor.execute(decision, train)
    assert again.ok
    assert again.verified
    assert kinds(cluster, train.id) == ["start", "checkpoint", "exit"]


def test_graceful_stop_of_a_zombie_ends_with_sigterm_after_grace(cluster: SimCluster) -> None:
    executor = SimExecutor(cluster, grace_s=90)
    zombie = running(cluster, Behaviour.ZOMBIE)
    t0 = cluster.now
    decision = decide(zombie, Level.GRACEFUL_STOP, t0)
    executor.execute(decision, zombie)
    assert executor.execute(decision, zombie).detail.endswith("already stopping")
    cluster.advance_to(t0 + 89 * S)
    assert executor.current(zombie) == zombie, "a crashed process ignores the checkpoint signal"
    cluster.advance_to(t0 + 100 * S)
    assert executor.verify(decision, zombie)
    assert kinds(cluster, zombie.id) == ["start", "checkpoint", "terminate", "exit"]
    ending = cluster.ending(zombie.id)
    assert ending is not None
    assert (ending.how, ending.at) == (EndHow.TERMINATED, t0 + 95 * S)
    assert ending.productive_at_stop is False


def test_force_kills_at_once_and_only_once(cluster: SimCluster) -> None:
    executor = SimExecutor(cluster)
    idle = running(cluster, Behaviour.IDLE)
    decision = decide(idle, Level.FORCE, cluster.now)
    outcome = executor.execute(decision, idle)
    assert outcome.ok
    assert outcome.verified
    assert outcome.released_gpu_uuids == idle.gpu_uuids
    assert executor.verify(decision, idle)
    assert all(w.id != idle.id for w in cluster.observe(cluster.now).workloads)
    assert executor.execute(decision, idle).ok
    assert kinds(cluster, idle.id) == ["start", "kill", "exit"]


def test_force_escalates_a_graceful_stop_still_in_grace(cluster: SimCluster) -> None:
    executor = SimExecutor(cluster)
    zombie = running(cluster, Behaviour.ZOMBIE)
    t0 = cluster.now
    executor.execute(decide(zombie, Level.GRACEFUL_STOP, t0), zombie)
    cluster.advance_to(t0 + 30 * S)
    outcome = executor.execute(decide(zombie, Level.FORCE, t0 + 30 * S), zombie)
    assert outcome.verified
    assert kinds(cluster, zombie.id) == ["start", "checkpoint", "kill", "exit"]
    ending = cluster.ending(zombie.id)
    assert ending is not None
    assert (ending.how, ending.at, ending.stop_at) == (EndHow.KILLED, t0 + 30 * S, t0)


def test_a_workload_gone_by_itself_needs_nothing(cluster: SimCluster) -> None:
    executor = SimExecutor(cluster)
    idle = running(cluster, Behaviour.IDLE)
    cluster.advance_to(cluster.start + timedelta(hours=5))  # its planned end is +4 h
    outcome = executor.execute(decide(idle, Level.FORCE, cluster.now), idle)
    assert (outcome.ok, outcome.verified) == (True, True)
    assert kinds(cluster, idle.id) == ["start", "exit"]


def test_another_incarnation_is_not_the_same_workload(cluster: SimCluster) -> None:
    executor = SimExecutor(cluster)
    zombie = running(cluster, Behaviour.ZOMBIE)
    older = dataclasses.replace(zombie, started_at=zombie.started_at - timedelta(days=1))
    assert executor.current(older) is None
    with pytest.raises(PreflightFailed):
        executor.execute(decide(older, Level.FORCE, cluster.now), older)
    assert kinds(cluster, zombie.id) == ["start"]


def test_fail_times_fails_the_first_executions_without_acting(cluster: SimCluster) -> None:
    executor = SimExecutor(cluster, fail_times=2)
    zombie = running(cluster, Behaviour.ZOMBIE)
    decision = decide(zombie, Level.FORCE, cluster.now)
    for _ in range(2):
        with pytest.raises(ExecutionError, match="simulated failure"):
            executor.execute(decision, zombie)
        assert kinds(cluster, zombie.id) == ["start"]
    assert executor.execute(decision, zombie).verified
    assert kinds(cluster, zombie.id) == ["start", "kill", "exit"]


def test_verify_with_a_clock_sees_the_exit_after_sleeping(cluster: SimCluster) -> None:
    clock = SimClock(cluster.now)
    executor = SimExecutor(cluster, clock=clock)
    train = running(cluster, Behaviour.TRAINING)
    decision = decide(train, Level.GRACEFUL_STOP, clock.now())
    executor.execute(decision, train)
    assert not executor.verify(decision, train)
    clock.sleep(30)
    assert not executor.verify(decision, train)
    clock.sleep(31)
    assert executor.verify(decision, train)


def test_score_tells_reclaimed_from_false_stops(cluster: SimCluster) -> None:
    executor = SimExecutor(cluster)
    zombie = running(cluster, Behaviour.ZOMBIE)
    train = running(cluster, Behaviour.TRAINING)
    t0 = cluster.now
    executor.execute(decide(zombie, Level.FORCE, t0), zombie)
    executor.execute(decide(train, Level.FORCE, t0), train)
    until = cluster.start + timedelta(hours=24)
    score = cluster.score(until)
    assert set(score.stopped) == {zombie.id, train.id}
    assert score.false_stops == (train.id,)
    assert score.protected_stops == ()
    hours_left = (until - t0) / timedelta(hours=1)
    assert score.reclaimed_gpu_hours == pytest.approx(1 * hours_left)
    assert score.lost_gpu_hours == pytest.approx(2 * hours_left)
    # Waste in [start, +24 h) with nobody acting: zombie 24 h, protected zombie 24 h,
    # idle 4 h (ends at +4 h), notebook from +0.5 h to its end at +19.5 h.
    assert score.waste_gpu_hours == pytest.approx(24 + 24 + 4 + 19)


def test_stopping_a_protected_workload_is_scored(cluster: SimCluster) -> None:
    executor = SimExecutor(cluster)
    guarded = running(cluster, Behaviour.ZOMBIE, protected=True)
    executor.execute(decide(guarded, Level.FORCE, cluster.now), guarded)
    assert cluster.score().protected_stops == (guarded.id,)
