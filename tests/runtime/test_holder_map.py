"""``HolderMap``: the running workloads by id and each GPU's holder, built again only when an
observation carries other GPU or workload tuples than the last one."""

from __future__ import annotations

from datetime import UTC, datetime

from gpusteward.domain.models import Gpu, Observation, Owner, Workload, WorkloadKind
from gpusteward.runtime.holder_map import HolderMap

T0 = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
GPUS = tuple(Gpu(f"GPU-{i}", "node-1", i, "H100", 81559.0) for i in range(3))


def _job(name: str, *uuids: str) -> Workload:
    return Workload(name, WorkloadKind.POD, name, Owner("alice", "nlp"), len(uuids), uuids, T0)


def _obs(gpus: tuple[Gpu, ...], workloads: tuple[Workload, ...]) -> Observation:
    return Observation(T0, gpus, (), workloads)


def test_each_gpu_is_held_by_the_workload_that_names_it_and_a_free_one_by_nobody() -> None:
    a, b = _job("a", "GPU-0"), _job("b", "GPU-2")
    workloads, holders = HolderMap().of(_obs(GPUS, (a, b)))
    assert workloads == {"a": a, "b": b}
    assert holders == {"GPU-0": "a", "GPU-1": "", "GPU-2": "b"}


def test_the_same_tuples_give_the_same_maps_and_other_tuples_new_ones() -> None:
    memo, jobs = HolderMap(), (_job("a", "GPU-0"),)
    first = memo.of(_obs(GPUS, jobs))
    again = memo.of(_obs(GPUS, jobs))
    assert again[0] is first[0]
    assert again[1] is first[1]
    moved_jobs = (_job("a", "GPU-1"),)
    moved = memo.of(_obs(GPUS, moved_jobs))  # a new workloads tuple
    assert moved[1] == {"GPU-0": "", "GPU-1": "a", "GPU-2": ""}
    fewer = memo.of(_obs(GPUS[:2], moved_jobs))  # a new GPU tuple, the same workloads
    assert fewer[1] == {"GPU-0": "", "GPU-1": "a"}
