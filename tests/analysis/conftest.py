"""A window of synthetic workloads, per-minute for an hour, with behaviours planted by the test."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gpusteward.domain.models import Gpu, Metric, Owner, Workload, WorkloadKind
from gpusteward.store.window import WindowStore, WindowView

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
SLOTS = 60  # one hour at one minute

#: Per-slot values of one GPU: a function of (slot index array, rng) per metric.
Profile = Mapping[Metric, Callable[[np.ndarray, np.random.Generator], np.ndarray]]


def training() -> dict[Metric, Callable[[np.ndarray, np.random.Generator], np.ndarray]]:
    return {
        Metric.GPU_UTIL: lambda t, r: np.clip(r.normal(88, 4, t.size), 0, 100),
        Metric.MEM_USED: lambda t, r: 60_000 + r.normal(0, 50, t.size),
        Metric.PROC_CPU: lambda t, r: r.normal(110, 10, t.size),
        Metric.PCIE_RX: lambda t, r: r.normal(2e9, 1e8, t.size),
    }


def inference() -> dict[Metric, Callable[[np.ndarray, np.random.Generator], np.ndarray]]:
    return {
        Metric.GPU_UTIL: lambda t, r: np.clip(r.normal(45, 6, t.size), 0, 100),
        Metric.MEM_USED: lambda t, r: 30_000 + r.normal(0, 50, t.size),
        Metric.PROC_CPU: lambda t, r: r.normal(60, 8, t.size),
        Metric.PCIE_RX: lambda t, r: r.normal(5e8, 5e7, t.size),
    }


@dataclass
class Cluster:
    store: WindowStore
    gpus: dict[str, Gpu]
    workloads: list[Workload]

    def view(self) -> WindowView:
        return self.store.view(NOW)


def build_cluster(
    profiles: list[Profile], *, gpus_each: int = 1, memory_gib: float = 79.6, seed: int = 0
) -> Cluster:
    """One workload per profile, each on ``gpus_each`` GPUs; power follows utilisation
    (100 W + 3 W per %) unless a profile sets it."""
    rng = np.random.default_rng(seed)
    store = WindowStore(window_s=SLOTS * 60, interval_s=60)
    gpus: dict[str, Gpu] = {}
    workloads: list[Workload] = []
    for k, _ in enumerate(profiles):
        uuids = tuple(f"GPU-{k:03d}-{j}" for j in range(gpus_each))
        for j, u in enumerate(uuids):
            gpus[u] = Gpu(u, f"node{k}", j, "H100", memory_gib * 1024, price_per_hour=3.0)
        workloads.append(
            Workload(
                id=f"job-{k}",
                kind=WorkloadKind.JOB,
                name=f"job-{k}",
                owner=Owner("alice", "ml"),
                gpus_requested=gpus_each,
                gpu_uuids=uuids,
                started_at=NOW - timedelta(hours=5),
            )
        )
    order = [u for w in workloads for u in w.gpu_uuids]
    store.register(order)
    t = np.arange(SLOTS)
    series: dict[Metric, np.ndarray] = {m: np.full((SLOTS, len(order)), np.nan) for m in Metric}
    col = 0
    for w, prof in zip(workloads, profiles, strict=True):
        for _ in w.gpu_uuids:
            for m, f in prof.items():
                series[m][:, col] = f(t, rng)
            if Metric.POWER not in prof:
                series[Metric.POWER][:, col] = (
                    100 + 3 * series[Metric.GPU_UTIL][:, col] + rng.normal(0, 5, SLOTS)
                )
            col += 1
    holders = {u: w.id for w in workloads for u in w.gpu_uuids}
    for i in range(SLOTS):
        at = NOW - timedelta(minutes=SLOTS - 1 - i)
        store.ingest_arrays(at, {m: np.maximum(series[m][i], 0) for m in Metric}, holders)
    return Cluster(store, gpus, workloads)


@pytest.fixture
def cluster() -> Callable[..., Cluster]:
    return build_cluster
