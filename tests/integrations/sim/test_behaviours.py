"""The shape of each behaviour's signals, checked on one workload observed densely."""

from __future__ import annotations

import itertools
from datetime import timedelta

import numpy as np
import numpy.typing as npt
import pytest

from gpusteward.domain.models import Observation, WorkloadKind
from gpusteward.integrations.sim import Behaviour, Mode, Row, SimCluster

F64 = npt.NDArray[np.float64]
H = 3600.0


def solo(
    behaviour: Behaviour, *, gpus: int = 1, run_h: float = 8.0, waste_h: float = 0.0, seed: int = 7
) -> SimCluster:
    """One node (with one spare GPU) running one workload that starts with the simulation."""
    row = Row(behaviour, WorkloadKind.JOB, "w", gpus, 1, (0, 0), (run_h, run_h), (waste_h, waste_h), "nlp")
    return SimCluster(nodes=1, gpus_per_node=gpus + 1, seed=seed, scenario=[row])


def trace(cluster: SimCluster, from_s: float, to_s: float, step_s: float) -> list[Observation]:
    times = np.arange(from_s, to_s, step_s).tolist()
    return [cluster.observe(cluster.start + timedelta(seconds=t)) for t in times]


def col(obs: list[Observation], metric: str, gpu: int = 0) -> F64:
    return np.array([getattr(o.samples[gpu], metric) for o in obs], dtype=np.float64)


def runs_of(mask: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    """(first index, length) of each run of True values."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(a), int(b - a)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def test_runs_of() -> None:
    assert runs_of(np.array([1, 1, 0, 1, 0, 0, 1], dtype=bool)) == [(0, 2), (3, 1), (6, 1)]


@pytest.mark.parametrize("seed", [1, 7, 42])
def test_training_has_checkpoint_dips_of_two_to_five_minutes(seed: int) -> None:
    cluster = solo(Behaviour.TRAINING, run_h=10, seed=seed)
    obs = trace(cluster, 0, 10 * H, 10)
    util, cpu, tx = col(obs, "gpu_util_pct"), col(obs, "proc_cpu_pct"), col(obs, "pcie_tx_bytes_per_s")
    dips = runs_of(util == 0)
    # 10 h with a checkpoint every 30-90 min (each 2-5 min long).
    assert 6 <= len(dips) <= 20
    for first, length in dips:
        # 10-s sampling: a dip of 120-300 s covers 11-31 samples.
        assert 11 <= length <= 31
        assert np.all(cpu[first : first + length] >= 100), "checkpoint keeps the CPU busy"
        assert np.all(tx[first : first + length] > 1e9), "checkpoint copies to the host"
    gaps_min = np.diff([first for first, _ in dips]) * 10 / 60
    assert np.all((gaps_min >= 30) & (gaps_min <= 96))


def test_training_is_busy_with_short_data_loading_dips_and_steady_memory() -> None:
    cluster = solo(Behaviour.TRAINING, run_h=6)
    obs = trace(cluster, 0, 6 * H, 10)
    util, mem = col(obs, "gpu_util_pct"), col(obs, "mem_used_mib")
    working = util > 0
    assert np.mean(util[working] >= 70) > 0.9
    stalls = runs_of((util > 0) & (util < 30))
    assert len(stalls) >= 10
    assert max(length for _, length in stalls) <= 7  # 20-60 s
    assert mem.min() > 0.5 * 81920
    assert mem.max() - mem.min() < 20
    wid = obs[0].workloads[0].id
    assert all(cluster.is_productive(wid, o.at) for o in obs)


@pytest.mark.parametrize("seed", [3, 4, 5, 6])
def test_loading_is_idle_while_memory_grows_then_busy(seed: int) -> None:
    cluster = solo(Behaviour.LOADING, run_h=3, seed=seed)
    obs = trace(cluster, 0, 45 * 60, 10)
    util, mem, cpu = col(obs, "gpu_util_pct"), col(obs, "mem_used_mib"), col(obs, "proc_cpu_pct")
    (first, length), *_ = runs_of(util == 0)
    assert first == 0
    assert 29 <= length <= 91  # 5-15 min at 10-s sampling
    load = slice(0, length)
    assert np.all(np.diff(mem[load]) > 0), "memory grows while the model loads"
    assert mem[length - 1] > 10 * mem[0]
    assert np.all(cpu[load] >= 100)
    after = util[length + 1 :]
    assert np.median(after) > 10
    wid = obs[0].workloads[0].id
    assert all(cluster.is_productive(wid, o.at) for o in obs)


def test_inference_follows_the_day_and_never_idles() -> None:
    cluster = solo(Behaviour.INFERENCE, run_h=48)
    obs = trace(cluster, 0, 48 * H, 300)
    util, mem = col(obs, "gpu_util_pct"), col(obs, "mem_used_mib")
    hours = np.array([o.at.hour for o in obs])
    assert util.min() >= 12
    night, afternoon = util[(hours >= 2) & (hours < 4)], util[(hours >= 14) & (hours < 16)]
    assert night.mean() < 25
    assert afternoon.mean() > night.mean() + 30
    assert mem.max() - mem.min() < 20


def test_notebook_bursts_then_idles_holding_memory() -> None:
    cluster = solo(Behaviour.NOTEBOOK, run_h=10, waste_h=1.5)
    obs = trace(cluster, 0, 10 * H, 30)
    util, mem, cpu = col(obs, "gpu_util_pct"), col(obs, "mem_used_mib"), col(obs, "proc_cpu_pct")
    wid = obs[0].workloads[0].id
    truth = cluster.truth(wid)
    assert truth.wasteful_from == cluster.start + timedelta(hours=1.5)
    active = np.array([o.at < truth.wasteful_from for o in obs])
    assert util[active].max() > 40
    assert util[~active].max() <= 2
    assert cpu[~active].max() <= 1
    assert mem[~active].min() > 1000
    assert [cluster.is_productive(wid, o.at) for o in obs] == active.tolist()


def test_zombie_holds_memory_at_zero_after_crashing() -> None:
    cluster = solo(Behaviour.ZOMBIE, run_h=10, waste_h=2)
    obs = trace(cluster, 0, 6 * H, 30)
    util, mem, cpu = col(obs, "gpu_util_pct"), col(obs, "mem_used_mib"), col(obs, "proc_cpu_pct")
    crashed = np.array([o.at >= cluster.start + timedelta(hours=2) for o in obs])
    assert np.median(util[~crashed]) >= 70
    assert np.all(util[crashed] == 0)
    assert np.all(cpu[crashed] == 0)
    assert mem[crashed].min() > 0.5 * 81920
    wid = obs[0].workloads[0].id
    assert [cluster.is_productive(wid, o.at) for o in obs] == (~crashed).tolist()


def test_overprovisioned_uses_two_of_eight_gpus() -> None:
    cluster = solo(Behaviour.OVERPROVISIONED, gpus=8, run_h=4)
    obs = trace(cluster, 0, 4 * H, 60)
    (workload,) = obs[0].workloads
    assert len(workload.gpu_uuids) == 8
    util = np.array([[col(obs, "gpu_util_pct", g)] for g in range(8)]).reshape(8, -1)
    mem = np.array([[col(obs, "mem_used_mib", g)] for g in range(8)]).reshape(8, -1)
    idle = (util.max(axis=1) == 0) & (mem.max(axis=1) == 0)
    assert idle.sum() == 6
    assert np.all(mem[~idle].min(axis=1) > 0.5 * 81920)
    assert np.all(np.median(util[~idle], axis=1) >= 70)
    assert all(cluster.is_productive(workload.id, o.at) for o in obs)


def test_idle_allocation_holds_gpus_doing_nothing() -> None:
    cluster = solo(Behaviour.IDLE, gpus=2, run_h=5)
    obs = trace(cluster, 0, 5 * H, 60)
    for gpu in (0, 1):
        assert col(obs, "gpu_util_pct", gpu).max() == 0
        assert col(obs, "mem_used_mib", gpu).max() == 0
        assert col(obs, "proc_cpu_pct", gpu).max() == 0
    assert all(len(o.workloads) == 1 for o in obs)
    wid = obs[0].workloads[0].id
    assert not any(cluster.is_productive(wid, o.at) for o in obs)


def test_free_gpus_report_zero_and_no_holder() -> None:
    cluster = solo(Behaviour.TRAINING, run_h=5)
    obs = trace(cluster, 0, H, 60)
    spare = cluster.gpus[1].uuid
    assert all(spare not in w.gpu_uuids for o in obs for w in o.workloads)
    assert col(obs, "gpu_util_pct", 1).max() == 0
    assert col(obs, "mem_used_mib", 1).max() == 0


def test_phases_cover_the_planned_life() -> None:
    cluster = solo(Behaviour.ZOMBIE, run_h=10, waste_h=2)
    (truth,) = cluster.truths()
    phases = cluster.phases(truth.workload_id)
    assert phases[0][0] == truth.started_at
    assert phases[-1] == (truth.wasteful_from, truth.planned_end, Mode.DEAD)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(phases))
