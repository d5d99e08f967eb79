"""Failing and throttling GPUs in the simulator: precursors before the failure, the hung job,
a failed GPU withdrawn from scheduling, all from the seed."""

from __future__ import annotations

from datetime import timedelta

from gpusteward.domain.health import XIDS, XidImpact
from gpusteward.domain.models import HEALTH_METRICS, Sample, WorkloadKind
from gpusteward.integrations.sim import Behaviour, EndHow, Row, SimCluster
from gpusteward.integrations.sim.health import THROTTLE_TEMP_C, XID_SHOWN_S, draw

H = timedelta(hours=1)
DAY = 24 * H


def sample_of(cluster: SimCluster, uuid: str, at_s: float) -> Sample:
    obs = cluster.observe(cluster.start + timedelta(seconds=at_s))
    (s,) = [s for s in obs.samples if s.gpu_uuid == uuid]
    return s


def test_failures_are_drawn_from_the_seed() -> None:
    assert draw(42, 64, 2, 2) == draw(42, 64, 2, 2)
    assert draw(42, 64, 2, 2) != draw(43, 64, 2, 2)
    a, b = SimCluster(seed=7), SimCluster(seed=7)
    a.advance_to(a.start + DAY)
    b.advance_to(b.start + DAY)
    assert a.failures() == b.failures()
    assert len(a.failures()) == 2  # the default scenario's, on 64 GPUs
    faults, throttles = draw(42, 64, 2, 2)
    assert len({f.gpu for f in faults} | {t.gpu for t in throttles}) == 4  # four different GPUs


def test_a_failing_gpu_shows_its_precursors_before_it_fails() -> None:
    for seed in (1, 42, 99):
        cluster = SimCluster(seed=seed)
        faults, _ = draw(seed, len(cluster.gpus), 2, 2)
        for f in faults:
            fresh = SimCluster(seed=seed)  # observed on its own: nothing depends on the others
            uuid = fresh.gpus[f.gpu].uuid
            # Every 10 min until an hour after the failure, plus the precursor's own minute.
            times = sorted({*range(0, int(f.fail_s + 3600), 600), int(f.precursor_s) + 60})
            seen = [(t, sample_of(fresh, uuid, t)) for t in times]
            sbe = [s.ecc_sbe_count for _, s in seen]
            assert all(v is not None for v in sbe)
            assert sbe == sorted(sbe)  # a counter: never down
            before = [s for t, s in seen if t < f.degrade_s]
            assert before
            assert all(s.ecc_sbe_count == 0 and s.xid_code == 0 for s in before)
            # Hours of rising corrected errors before anything fatal.
            at_precursor = sample_of(SimCluster(seed=seed), uuid, f.precursor_s)
            assert at_precursor.ecc_sbe_count is not None
            assert at_precursor.ecc_sbe_count > 0
            assert f.fail_s - f.degrade_s >= 3 * 3600
            xids = [(t, s.xid_code) for t, s in seen if s.xid_code]
            first_t, first_xid = xids[0]
            assert first_xid == f.precursor_xid
            assert XIDS[first_xid].impact is XidImpact.DEGRADING
            assert first_t < f.fail_s
            fatal = [(t, s) for t, s in seen if s.xid_fatal]
            assert fatal
            assert fatal[0][0] >= f.fail_s
            assert all(s.xid_code == f.xid and XIDS[f.xid].impact is XidImpact.FAILED for _, s in fatal)
            assert all(s.gpu_util_pct == 0 for _, s in fatal)
            assert all((s.ecc_dbe_count == 1) == (f.xid == 48) for _, s in fatal)
            if f.replays:
                assert max(s.pcie_replay_count or 0 for _, s in seen) > 0


def test_the_precursor_xid_shows_for_a_while_whatever_the_tick() -> None:
    cluster = SimCluster(seed=42)
    f = cluster.health.faults[0]
    uuid = cluster.gpus[f.gpu].uuid
    assert sample_of(cluster, uuid, f.precursor_s - 1).xid_code == 0
    assert sample_of(cluster, uuid, f.precursor_s + XID_SHOWN_S - 1).xid_code == f.precursor_xid
    assert sample_of(cluster, uuid, f.precursor_s + XID_SHOWN_S).xid_code == 0


def test_healthy_gpus_read_zero_and_a_couple_throttle() -> None:
    cluster = SimCluster(seed=42)
    faults, throttles = cluster.health.faults, cluster.health.throttles
    assert len(throttles) == 2
    failing = {cluster.gpus[f.gpu].uuid for f in faults}
    th = throttles[0]
    obs = cluster.observe(cluster.start + timedelta(seconds=(th.from_s + th.to_s) / 2))
    hot = cluster.gpus[th.gpu].uuid
    for s in obs.samples:
        values = {m: s.value(m) for m in HEALTH_METRICS}
        assert all(v is not None for v in values.values())  # the simulator reads them all
        if s.gpu_uuid == hot:
            assert s.throttled == 1
            assert s.temp_c is not None
            assert s.temp_c >= THROTTLE_TEMP_C
        elif s.gpu_uuid not in failing:
            assert all(v == 0 for v in values.values()), (s.gpu_uuid, values)
    after = cluster.observe(cluster.start + timedelta(seconds=th.to_s + 60))
    assert next(s for s in after.samples if s.gpu_uuid == hot).throttled == 0


def test_dropped_samples_read_no_health_either() -> None:
    cluster = SimCluster(seed=42, drop_rate=1.0)
    s = cluster.observe(cluster.start).samples[0]
    assert all(s.value(m) is None for m in HEALTH_METRICS)


def two_gpu_node(rows: list[Row]) -> SimCluster:
    return SimCluster(nodes=1, gpus_per_node=2, scenario=rows, failing_gpus=1, seed=3)


def test_the_job_on_a_failed_gpu_hangs_and_the_gpu_takes_no_new_job() -> None:
    rows = [
        Row(Behaviour.TRAINING, WorkloadKind.JOB, "big", 2, 1, (0, 0), (30, 30), (0, 0), "nlp"),
        Row(Behaviour.TRAINING, WorkloadKind.JOB, "small", 1, 1, (1, 1), (2, 2), (0, 0), "nlp"),
    ]
    cluster = two_gpu_node(rows)
    (f,) = cluster.health.faults
    failed = cluster.gpus[f.gpu].uuid
    (big,) = cluster.observe(cluster.start + timedelta(seconds=f.fail_s - 60)).workloads
    assert cluster.stuck_at(big.id) is None
    assert all((s.gpu_util_pct or 0) > 0 for s in cluster.observe(cluster.now).samples)  # training
    obs = cluster.observe(cluster.start + timedelta(seconds=f.fail_s + 600))
    assert cluster.stuck_at(big.id) == cluster.start + timedelta(seconds=f.fail_s)
    # Both of its GPUs stand still, memory held: a hung job, not an idle one by choice.
    assert all(s.gpu_util_pct == 0 and (s.mem_used_mib or 0) > 0 for s in obs.samples)
    (failure,) = cluster.failures()
    assert (failure.gpu_uuid, failure.stuck_workload, failure.xid) == (failed, big.id, f.xid)
    # A hung process ignores the checkpoint signal; SIGTERM still ends it.
    cluster.checkpoint(big.id, cluster.now)
    later = cluster.observe(cluster.now + timedelta(minutes=10))
    assert [w.id for w in later.workloads] == [big.id]
    cluster.terminate(big.id, cluster.now)
    obs = cluster.observe(cluster.now + timedelta(minutes=1))
    (small,) = obs.workloads
    assert small.gpu_uuids != (failed,)  # placed on the healthy GPU only
    ending = cluster.ending(big.id)
    assert ending is not None
    assert ending.how is EndHow.TERMINATED


def test_failures_before_until_only() -> None:
    cluster = SimCluster(seed=42)
    first = min(f.fail_s for f in cluster.health.faults)
    assert cluster.failures(cluster.start + timedelta(seconds=first - 1)) == ()
    cluster.advance_to(cluster.start + DAY)
    assert len(cluster.failures(cluster.start + timedelta(seconds=first))) == 1
