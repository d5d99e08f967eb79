"""The simulated cluster: determinism, ground truth, scheduling, missing data, scenarios."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timedelta

import pytest

from gpusteward.domain.models import PROTECT_KEY, WorkloadKind
from gpusteward.integrations.sim import Behaviour, EndHow, Row, SimCluster

H = timedelta(hours=1)


def times(cluster: SimCluster, hours: float, step_s: float) -> list[datetime]:
    return [cluster.start + timedelta(seconds=s) for s in range(0, int(hours * 3600), int(step_s))]


def by_behaviour(cluster: SimCluster, behaviour: Behaviour, *, protected: bool = False) -> str:
    (truth,) = [t for t in cluster.truths() if t.behaviour is behaviour and t.protected is protected]
    return truth.workload_id


# ----- determinism ---------------------------------------------------------------------


def test_same_seed_gives_identical_observations() -> None:
    a, b = SimCluster(seed=5), SimCluster(seed=5)
    for at in times(a, 12, 600):
        assert a.observe(at) == b.observe(at)
    assert a.truths() == b.truths()
    assert a.events == b.events


def test_different_seed_gives_different_observations() -> None:
    a, b = SimCluster(seed=5), SimCluster(seed=6)
    at = a.start + 2 * H
    assert a.observe(at).samples != b.observe(at).samples
    assert a.truths() != b.truths()


def test_trace_does_not_depend_on_how_often_it_is_observed() -> None:
    dense, sparse = SimCluster(seed=9), SimCluster(seed=9)
    sparse_times = set(times(sparse, 8, 1200))
    for at in times(dense, 8, 30):
        seen = dense.observe(at)
        if at in sparse_times:
            assert sparse.observe(at) == seen


# ----- ground truth (small scenario) ---------------------------------------------------


def test_small_scenario_ground_truth() -> None:
    cluster = SimCluster(scenario="small")
    assert (cluster.nodes, cluster.gpus_per_node) == (2, 4)
    kinds = Counter(t.behaviour for t in cluster.truths())
    assert kinds == {
        Behaviour.TRAINING: 1,
        Behaviour.ZOMBIE: 2,
        Behaviour.IDLE: 1,
        Behaviour.NOTEBOOK: 1,
    }  # the loading one arrives at +1 h

    zombie = cluster.truth(by_behaviour(cluster, Behaviour.ZOMBIE))
    assert zombie.wasteful_from == zombie.started_at + 2 * H == cluster.start - H
    minute = timedelta(minutes=1)
    assert cluster.is_productive(zombie.workload_id, zombie.wasteful_from - minute)
    assert not cluster.is_productive(zombie.workload_id, zombie.wasteful_from + minute)

    train = cluster.truth(by_behaviour(cluster, Behaviour.TRAINING))
    assert train.wasteful_from is None
    assert cluster.is_productive(train.workload_id, cluster.start + 10 * H)
    assert not cluster.is_productive(train.workload_id, train.planned_end + minute)
    assert not cluster.is_productive(train.workload_id, train.started_at - minute)

    idle = cluster.truth(by_behaviour(cluster, Behaviour.IDLE))
    assert idle.wasteful_from == idle.started_at
    assert not cluster.is_productive(idle.workload_id, idle.started_at + minute)

    notebook = cluster.truth(by_behaviour(cluster, Behaviour.NOTEBOOK))
    assert notebook.wasteful_from == notebook.started_at + H == cluster.start + 0.5 * H
    assert cluster.is_productive(notebook.workload_id, notebook.started_at + 10 * minute)
    assert not cluster.is_productive(notebook.workload_id, notebook.wasteful_from + minute)

    cluster.advance_to(cluster.start + 2 * H)
    loading = cluster.truth(by_behaviour(cluster, Behaviour.LOADING))
    assert loading.started_at == cluster.start + H
    assert loading.wasteful_from is None


def test_protected_workload_carries_the_label() -> None:
    cluster = SimCluster(scenario="small")
    wid = by_behaviour(cluster, Behaviour.ZOMBIE, protected=True)
    (workload,) = [w for w in cluster.observe(cluster.start).workloads if w.id == wid]
    assert workload.tag(PROTECT_KEY) == "true"
    assert workload.ref["sim_id"] == wid
    others = [w for w in cluster.observe(cluster.start).workloads if w.id != wid]
    assert all(w.tag(PROTECT_KEY) is None for w in others)


def test_unknown_workload_has_no_truth() -> None:
    cluster = SimCluster(scenario="small")
    with pytest.raises(KeyError):
        cluster.truth("job-9999")


# ----- scheduling ----------------------------------------------------------------------


def test_a_departure_frees_gpus_for_a_queued_arrival() -> None:
    rows = [
        Row(Behaviour.TRAINING, WorkloadKind.JOB, "a", 2, 1, (0, 0), (1, 1), (0, 0), "nlp"),
        Row(Behaviour.TRAINING, WorkloadKind.JOB, "b", 2, 1, (0.5, 0.5), (2, 2), (0, 0), "nlp"),
    ]
    cluster = SimCluster(scenario=rows)
    (first,) = cluster.observe(cluster.start + 0.75 * H).workloads
    assert cluster.queued == 1
    obs = cluster.observe(cluster.start + H + timedelta(seconds=1))
    (second,) = obs.workloads
    assert second.id != first.id
    assert second.gpu_uuids == first.gpu_uuids
    assert second.started_at == cluster.start + H
    assert cluster.queued == 0
    ending = cluster.ending(first.id)
    assert ending is not None
    assert (ending.how, ending.at, ending.stop_at) == (EndHow.FINISHED, cluster.start + H, None)
    kinds = [(e.workload_id, e.kind) for e in cluster.events]
    assert kinds.index((first.id, "exit")) < kinds.index((second.id, "start"))


def test_a_finished_workload_leaves_its_gpu_free() -> None:
    cluster = SimCluster(scenario="small")
    idle = cluster.truth(by_behaviour(cluster, Behaviour.IDLE))
    (uuid,) = next(w for w in cluster.observe(cluster.start).workloads if w.id == idle.workload_id).gpu_uuids
    obs = cluster.observe(idle.planned_end + timedelta(seconds=30))
    assert all(w.id != idle.workload_id for w in obs.workloads)
    assert all(uuid not in w.gpu_uuids for w in obs.workloads)
    (sample,) = [s for s in obs.samples if s.gpu_uuid == uuid]
    assert (sample.gpu_util_pct, sample.mem_used_mib) == (0.0, 0.0)


def test_default_day_keeps_allocations_consistent_and_reuses_gpus() -> None:
    cluster = SimCluster()
    node_of = {g.uuid: g.node for g in cluster.gpus}
    holders: dict[str, set[str]] = defaultdict(set)
    for at in times(cluster, 24, 600):
        obs = cluster.observe(at)
        held = [u for w in obs.workloads for u in w.gpu_uuids]
        assert len(held) == len(set(held)), "a GPU is held by one workload at a time"
        for w in obs.workloads:
            assert len(w.gpu_uuids) == w.gpus_requested
            assert len({node_of[u] for u in w.gpu_uuids}) == 1
            assert w.started_at <= at
            for u in w.gpu_uuids:
                holders[u].add(w.id)
    assert any(len(ids) >= 2 for ids in holders.values())
    assert len(cluster.endings()) >= 10
    assert all(e.how is EndHow.FINISHED for e in cluster.endings())


def test_default_scenario_mix() -> None:
    cluster = SimCluster()
    start_obs = cluster.observe(cluster.start)
    held = sum(len(w.gpu_uuids) for w in start_obs.workloads)
    assert held >= 0.8 * len(cluster.gpus)
    cluster.advance_to(cluster.start + 24 * H)
    truths = cluster.truths()
    counts = Counter(t.behaviour for t in truths)
    assert all(counts[b] >= 3 for b in Behaviour), counts
    assert any(t.started_at >= cluster.start + 6 * H for t in truths), "arrivals through the day"
    wasteful = [t for t in truths if t.wasteful_from is not None]
    assert any(t.protected for t in wasteful)
    early = [t for t in wasteful if t.wasteful_from is not None and t.wasteful_from <= cluster.start + 22 * H]
    assert len(early) >= 0.8 * len(wasteful)
    assert cluster.score().waste_gpu_hours > 0


def test_scales_with_cluster_size() -> None:
    base, big = SimCluster(), SimCluster(nodes=16)
    for c in (base, big):
        c.advance_to(c.start + 24 * H)
    assert len(big.gpus) == 128
    assert 1.6 <= len(big.truths()) / len(base.truths()) <= 2.4


def test_small_nodes_clamp_large_requests() -> None:
    cluster = SimCluster(nodes=4, gpus_per_node=4)
    obs = cluster.observe(cluster.start + 6 * H)
    assert obs.workloads
    assert all(len(w.gpu_uuids) <= 4 for w in obs.workloads)


def test_days_repeat_after_the_first() -> None:
    cluster = SimCluster()
    cluster.advance_to(cluster.start + 48 * H)
    second_day = [t for t in cluster.truths() if t.started_at >= cluster.start + 24 * H]
    assert len(second_day) >= 10


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        SimCluster(scenario="nope")
    with pytest.raises(ValueError, match="drop_rate"):
        SimCluster(drop_rate=1.5)


# ----- missing data --------------------------------------------------------------------


def test_drop_rate_blanks_about_that_share_of_samples() -> None:
    cluster = SimCluster(drop_rate=0.25)
    samples = [s for at in times(cluster, 1, 60) for s in cluster.observe(at).samples]
    dropped = [s for s in samples if s.gpu_util_pct is None]
    assert 0.2 <= len(dropped) / len(samples) <= 0.3
    assert all(s.mem_used_mib is None and s.proc_cpu_pct is None for s in dropped)
    clean = SimCluster()
    assert all(s.gpu_util_pct is not None for at in times(clean, 1, 60) for s in clean.observe(at).samples)


def test_stale_gpus_repeat_their_last_sample() -> None:
    uuid = "GPU-sim-00-2"
    cluster = SimCluster(scenario="small", stale_gpus={uuid})
    t1, t2 = cluster.start + timedelta(minutes=1), cluster.start + timedelta(minutes=5)
    first = {s.gpu_uuid: s for s in cluster.observe(t1).samples}
    second = {s.gpu_uuid: s for s in cluster.observe(t2).samples}
    assert second[uuid] == first[uuid]
    assert second[uuid].at == t1
    assert second["GPU-sim-00-3"].at == t2
    cluster.stale_gpus.clear()
    third = {s.gpu_uuid: s for s in cluster.observe(t2 + H).samples}
    assert third[uuid].at == t2 + H
