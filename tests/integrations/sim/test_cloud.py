"""The simulator's cloud (issue 18), through its ports: instances behind the nodes stopped and
started (``InstanceControl``), and spot interruptions (``InterruptionWatch``) on a seeded
schedule, with the checkpoint signals that came before each deadline counted."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from gpusteward.analysis.cost import DEFAULT_SPOT_DISCOUNT, PriceTable
from gpusteward.domain.cloud import INTERRUPTION_CHECKPOINT_STEP, InstanceControl, Lifecycle
from gpusteward.domain.errors import ExecutionError
from gpusteward.domain.integration import BuildContext
from gpusteward.domain.models import Decision, Level, Workload
from gpusteward.integrations.sim import (
    DEFAULT_START,
    Behaviour,
    EndHow,
    Row,
    SimClock,
    SimCluster,
    SimExecutor,
    SimSource,
)
from gpusteward.integrations.sim.behaviours import Mode, Plan
from gpusteward.integrations.sim.build import build
from gpusteward.integrations.sim.capacity import CHECKPOINT_EXIT_S, kept_progress_s, resume_plan
from gpusteward.integrations.sim.cloud import CloudPlan, CloudSource, SimCloud, SimInstanceControl, lifecycles
from gpusteward.integrations.sim.scenarios import JOB
from gpusteward.integrations.sim.settings import SimSourceSettings
from gpusteward.integrations.sim.spot import SimInterruptions

H = timedelta(hours=1)
MIN = timedelta(minutes=1)
PRICES = {Lifecycle.ON_DEMAND: 2.0, Lifecycle.RESERVED: 1.3, Lifecycle.SPOT: 0.8}
#: A trainer on 2 GPUs from the start for 20 h; later, a second one that needs a node of its own.
TRAINER = Row(Behaviour.TRAINING, JOB, "train", 2, 1, (0, 0), (20, 20), (0, 0), "nlp")
LATE = Row(Behaviour.TRAINING, JOB, "late", 2, 1, (3, 3), (5, 5), (0, 0), "vision")


def two_nodes(plan: CloudPlan) -> tuple[SimCluster, SimCloud]:
    """2 nodes of 2 GPUs: the trainer on sim-node-00, sim-node-01 free until the late job comes."""
    cluster = SimCluster(nodes=2, gpus_per_node=2, scenario=[TRAINER, LATE])
    return cluster, SimCloud(cluster, plan)


def test_the_fleet_is_drawn_by_seed_and_priced_by_lifecycle() -> None:
    plan = CloudPlan(spot_share=0.25, reserved_share=0.25, gpu_hour_prices=PRICES)
    fleet = lifecycles(8, plan, seed=42)
    assert sorted(fleet).count(Lifecycle.SPOT) == 2
    assert fleet.count(Lifecycle.RESERVED) == 2
    assert fleet.count(Lifecycle.ON_DEMAND) == 4
    assert lifecycles(8, plan, seed=42) == fleet
    assert any(lifecycles(8, plan, seed=s) != fleet for s in range(1, 5))
    cloud = SimCloud(SimCluster(seed=42), plan)
    control = SimInstanceControl(cloud)
    assert isinstance(control, InstanceControl)
    instances = control.instances()
    assert sorted(instances) == [f"sim-node-{n:02d}" for n in range(8)]
    for node, inst in instances.items():
        assert (inst.node, inst.state, inst.gpus, inst.recorded) == (node, "running", 8, {})
        assert inst.price_per_hour == pytest.approx(8 * PRICES[inst.lifecycle])
        assert control.instance(inst.id) == inst
    assert control.instance("i-nowhere") is None


def test_stop_takes_the_node_away_and_start_brings_it_back() -> None:
    cluster, cloud = two_nodes(CloudPlan(spot_share=0, reserved_share=0, gpu_hour_prices=PRICES))
    control, source = SimInstanceControl(cloud), CloudSource(SimSource(cluster))
    t0 = cluster.start + H
    source.observe(t0)
    idle = control.instances()["sim-node-01"]
    done = control.stop(idle, "idle for 2 h")
    assert idle.id in done
    stopped = control.instance(idle.id)
    assert stopped is not None
    assert (stopped.state, stopped.recorded["action"]) == ("stopped", "stop")
    assert "already stopped" in control.stop(idle, "again")
    # Its GPUs leave the observation; the late job (3 h) finds no node and waits.
    seen = source.observe(cluster.start + 4 * H)
    assert {g.node for g in seen.gpus} == {"sim-node-00"}
    assert {s.gpu_uuid for s in seen.samples} == {g.uuid for g in seen.gpus}
    assert cluster.queued == 1
    # Back at 5 h: the late job starts on it at once.
    cluster.advance_to(cluster.start + 5 * H)
    assert "started" in control.start(idle.id, stopped.recorded)
    back = control.instance(idle.id)
    assert back is not None
    assert (back.state, back.recorded) == ("running", {})
    assert cluster.queued == 0
    assert {g.node for g in source.observe(cluster.start + 5 * H).gpus} == {"sim-node-00", "sim-node-01"}
    assert "already running" in control.start(idle.id, {})
    # Stopped from 1 h to 5 h: 4 instance-hours at its on-demand price of 2 GPUs.
    figures = cloud.figures(cluster.start + 6 * H)
    assert figures == {"instances_stopped": 1, "instance_hours_saved": 4.0, "instance_cost_saved": 16.0}


def test_a_busy_node_or_an_unknown_instance_is_refused_and_nothing_changes() -> None:
    cluster, cloud = two_nodes(CloudPlan(spot_share=0, reserved_share=1.0, gpu_hour_prices=PRICES))
    control = SimInstanceControl(cloud)
    cluster.advance_to(cluster.start + H)
    busy = control.instances()["sim-node-00"]
    with pytest.raises(ExecutionError, match="still runs 1 workloads"):
        control.stop(busy, "idle?")
    assert control.instances()["sim-node-00"].state == "running"
    assert cluster.down_nodes == set()
    with pytest.raises(ExecutionError, match="no longer exists"):
        control.start("i-nowhere", {})
    # A reserved instance's stopped hours are counted, but it is paid for anyway: no money saved.
    control.stop(control.instances()["sim-node-01"], "idle")
    assert cloud.figures(cluster.start + 2 * H) == {
        "instances_stopped": 1,
        "instance_hours_saved": 1.0,
        "instance_cost_saved": 0.0,
    }


#: Running for 6 h at the start (it has written checkpoints of its own), 30 h planned.
VETERAN = Row(Behaviour.TRAINING, JOB, "train", 2, 1, (-6, -6), (30, 30), (0, 0), "nlp")


def spot_cluster(seed: int = 42, per_day: float = 6.0) -> tuple[SimCluster, SimInterruptions]:
    cluster = SimCluster(nodes=1, gpus_per_node=2, seed=seed, scenario=[VETERAN])
    cloud = SimCloud(cluster, CloudPlan(spot_share=1.0, gpu_hour_prices=PRICES))
    return cluster, SimInterruptions(cloud, per_day=per_day, replacement_s=600.0)


def notices(watch: SimInterruptions, until: datetime, step: timedelta) -> list[tuple[str, str, datetime]]:
    t, seen = watch.cluster.start, {}
    while t <= until:
        for n in watch.poll(t):
            seen[n.key] = (n.node, n.instance_id, n.seen_at)
        t += step
    return sorted(seen.values(), key=lambda v: v[2])


def test_progress_kept_and_the_rest_of_a_plan() -> None:
    plan = Plan(
        Behaviour.TRAINING,
        starts_s=(0.0, 1800.0, 2000.0, 5000.0, 5200.0),
        modes=(Mode.BUSY, Mode.CHECKPOINT, Mode.BUSY, Mode.CHECKPOINT, Mode.BUSY),
        run_s=9000.0,
        wasteful_from_s=None,
        util_base=80.0,
        mem_frac=0.5,
        active_gpus=2,
    )
    # A checkpoint counts once written (its segment's end), not while it is being written.
    assert [kept_progress_s(plan, t) for t in (100.0, 1900.0, 2000.0, 5100.0, 8000.0)] == [
        0.0,
        0.0,
        2000.0,
        2000.0,
        5200.0,
    ]
    rest = resume_plan(plan, 2500.0)
    assert (rest.starts_s, rest.modes, rest.run_s) == (
        (0.0, 2500.0, 2700.0),
        (Mode.BUSY, Mode.CHECKPOINT, Mode.BUSY),
        6500.0,
    )
    zombie = replace(plan, wasteful_from_s=6000.0)
    assert resume_plan(zombie, 2500.0).wasteful_from_s == 3500.0


def test_the_schedule_depends_on_the_seed_alone() -> None:
    days = 5 * 24 * H
    a = notices(spot_cluster()[1], spot_cluster()[0].start + days, MIN)
    b_cluster, b = spot_cluster()
    # Polled every 2 minutes (the warning's length) instead of every minute: the same notices.
    assert notices(b, b_cluster.start + days, 2 * MIN) == a
    # A notice is there only until its deadline.
    late = b.notices[0].deadline
    assert late is not None
    assert b.notices[0] in b.poll(late - timedelta(seconds=1))
    assert b.notices[0] not in b.poll(late)
    assert a, "six a day for five days draws some"
    assert notices(spot_cluster(seed=43)[1], b_cluster.start + days, MIN) != a
    for n in b.notices:
        assert n.deadline == n.seen_at + timedelta(minutes=2)
    # Each taken instance is replaced 10 minutes later by the next generation.
    generations = [int(iid.rsplit("-", 1)[1]) for _, iid, _ in a]
    assert generations == sorted(set(generations))
    for i in b.done:
        assert b.cloud.instances()["sim-node-00"].id != i.notice.instance_id


def first_notice(watch: SimInterruptions) -> tuple[datetime, Workload]:
    """Poll minute by minute to the first notice; the trainer it finds on the node."""
    t = watch.cluster.start
    while not (found := watch.poll(t)):
        t += MIN
    (notice,) = found
    (run,) = watch.cluster.runs_on(notice.node)
    return t, run.workload


def checkpoint(workload: Workload, at: datetime, cluster: SimCluster) -> None:
    decision = Decision(workload.id, at, Level.GRACEFUL_STOP, INTERRUPTION_CHECKPOINT_STEP, "spot")
    executor = SimExecutor(cluster, clock=SimClock(at))
    assert executor.supports(workload, Level.GRACEFUL_STOP)
    outcome = executor.checkpoint_now(decision, workload)
    assert (outcome.ok, outcome.verified) == (True, True)
    assert executor.verify(decision, workload)


def test_a_checkpoint_before_the_deadline_keeps_the_progress() -> None:
    cluster, watch = spot_cluster()
    seen, trainer = first_notice(watch)
    checkpoint(trainer, seen, cluster)
    assert cluster.workload(trainer.id) is not None, "the signal alone stops nothing"
    cluster.advance_to(seen + 15 * MIN)
    (done,) = watch.done
    assert done.checkpointed
    (job,) = done.jobs
    assert (job.workload_id, job.checkpointed, job.resubmitted) == (trainer.id, True, True)
    taken_s = (done.taken_at - cluster.start).total_seconds()
    signal_s = (seen - cluster.start).total_seconds()
    # Only the work between the signal and the take is lost (2 GPUs).
    assert job.lost_gpu_hours == pytest.approx(2 * (taken_s - signal_s) / 3600)
    ending = cluster.ending(trainer.id)
    assert ending is not None
    assert (ending.how, ending.at, ending.stop_at) == (EndHow.INTERRUPTED, done.taken_at, None)
    # Submitted again at the take, started on the replacement 10 minutes later, from the checkpoint.
    again = cluster.workload(f"{trainer.id}-r1")
    assert again is not None
    assert again.started_at == done.taken_at + 10 * MIN
    original = cluster.truth(trainer.id)
    rest = cluster.truth(again.id)
    assert rest.planned_end - rest.started_at == (original.planned_end - original.started_at) - (
        seen - trainer.started_at
    )
    # The take is the cloud's doing, not a stop: no false action, nothing reclaimed.
    score = cluster.score(seen + 15 * MIN)
    assert (score.stopped, score.false_stops, score.reclaimed_gpu_hours) == ((), (), 0.0)
    assert watch.figures(seen + 15 * MIN) == {
        "interruptions": 1,
        "interruptions_checkpointed": 1,
        "interrupted_jobs": 1,
        "jobs_resumed_from_checkpoint": 1,
        "jobs_lost_progress": 0,
        "interruption_lost_gpu_hours": round(job.lost_gpu_hours, 2),
    }


@pytest.mark.parametrize("late_s", [None, CHECKPOINT_EXIT_S - 30])
def test_without_a_timely_checkpoint_the_work_since_its_own_last_one_is_lost(late_s: float | None) -> None:
    cluster, watch = spot_cluster()
    seen, trainer = first_notice(watch)
    notice = watch.notices[0]
    assert notice.deadline is not None
    if late_s is not None:  # signalled, but too late to write the checkpoint before the take
        checkpoint(trainer, notice.deadline - timedelta(seconds=late_s), cluster)
    cluster.advance_to(seen + 15 * MIN)
    (done,) = watch.done
    assert not done.checkpointed
    (job,) = done.jobs
    taken_s = (done.taken_at - trainer.started_at).total_seconds()
    plan = cluster._runs[trainer.id].plan
    kept = kept_progress_s(plan, taken_s)
    assert 0 < kept <= taken_s, "in 6 h a trainer has written checkpoints of its own (every 30-90 min)"
    assert (job.checkpointed, job.resubmitted) == (False, True)
    assert job.lost_gpu_hours == pytest.approx(2 * (taken_s - kept) / 3600)
    again = cluster.truth(f"{trainer.id}-r1")
    assert (again.planned_end - again.started_at).total_seconds() == pytest.approx(plan.run_s - kept)
    figures = watch.figures(seen + 15 * MIN)
    assert (figures["interruptions_checkpointed"], figures["jobs_lost_progress"]) == (0, 1)


def test_a_stopped_spot_instance_gets_no_notice_and_is_not_taken() -> None:
    seen, trainer = first_notice(spot_cluster()[1])
    # The same schedule, with the node's trainer gone and its instance stopped before the notice.
    cluster, watch = spot_cluster()
    cluster.kill(trainer.id, seen - 10 * MIN)
    control = SimInstanceControl(watch.cloud)
    cluster.advance_to(seen - 5 * MIN)
    control.stop(control.instances()["sim-node-00"], "idle")
    assert watch.poll(seen + H) == []
    assert (watch.notices, watch.done) == ([], [])
    assert control.instances()["sim-node-00"].state == "stopped"


def test_sim_build_brings_the_cloud_parts_only_when_asked() -> None:
    ctx = BuildContext(clock=SimClock(DEFAULT_START), prices=PriceTable().with_prices)
    plain = build(SimSourceSettings(nodes=2, gpus_per_node=2), ctx)
    assert (plain.instances, plain.interruptions) == (None, None)
    cloudy = build(SimSourceSettings(nodes=4, gpus_per_node=2, cloud_nodes=True, spot_share=0.5), ctx)
    assert isinstance(cloudy.instances, InstanceControl)
    assert isinstance(cloudy.interruptions, SimInterruptions)
    kinds = [i.lifecycle for i in cloudy.instances.instances().values()]
    assert kinds.count(Lifecycle.SPOT) == 2
    # Priced from the cost table: its A100 80 GB price a GPU-hour, spot at its default discount.
    gpu_hour = PriceTable().price("NVIDIA A100-SXM4-80GB", "on-demand")
    for inst in cloudy.instances.instances().values():
        share = {Lifecycle.ON_DEMAND: 1.0, Lifecycle.SPOT: 1 - DEFAULT_SPOT_DISCOUNT}.get(inst.lifecycle)
        if share is not None:
            assert inst.price_per_hour == pytest.approx(2 * gpu_hour * share)
