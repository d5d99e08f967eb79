"""Each GPU node as the window shows it now: its GPUs, how many a workload holds, and whether all
of them are free and idle with fresh samples. Parking and instance stops both start from this."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gpusteward.domain.models import Gpu, Metric, Workload
from gpusteward.store.window import WindowView


@dataclass(frozen=True, slots=True)
class NodeNow:
    name: str
    #: Its GPUs, by index.
    gpus: tuple[Gpu, ...]
    #: GPUs a workload holds now.
    held: int
    #: No GPU held, and every one's utilisation fresh and at most the idle threshold (no data is
    #: not idle).
    idle: bool


def nodes_now(
    view: WindowView,
    gpus: Mapping[str, Gpu],
    workloads: Mapping[str, Workload],
    *,
    stale_after_s: float,
    idle_util_pct: float,
) -> list[NodeNow]:
    """Every node with GPUs now, by name."""
    by_node: dict[str, list[Gpu]] = {}
    for g in gpus.values():
        by_node.setdefault(g.node, []).append(g)
    held = {u for w in workloads.values() for u in w.gpu_uuids}
    age, util = view.age_s(), view.last(Metric.GPU_UTIL)
    out = []
    for name in sorted(by_node):
        gs = tuple(sorted(by_node[name], key=lambda g: g.index))
        n_held = sum(g.uuid in held for g in gs)
        idx = [view.index_of(g.uuid) for g in gs]
        idle = n_held == 0 and all(
            i is not None
            and bool(age[i] <= stale_after_s)
            and bool(np.isfinite(util[i]))
            and float(util[i]) <= idle_util_pct
            for i in idx
        )
        out.append(NodeNow(name, gs, n_held, idle))
    return out
