"""Shareable GPUs in the simulator: a pool of light services, each on a whole GPU of its own.

A serving pool as the dev trace shows it (issue 23): services that are never idle long enough to
stop, but use a few percent of their GPU, with short bursts at their own times of day and a
steady share of memory. Kept apart from ``SimCluster`` so that adding them changes nothing the
demo scores (its findings, stops and reclaimed GPU-hours come from the cluster alone); the demo
plans their consolidation from this history with the same planner the tick uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

from gpusteward.analysis.consolidation import Item, Usage

#: The pool's cards: MIG-capable, 80 GB (the cost model prices them).
MODEL = "NVIDIA H100 80GB HBM3"
MEMORY_MIB = 81920.0
TEAMS = ("nlp", "vision", "speech", "recsys")


@dataclass(frozen=True)
class LightServices:
    """``count`` light services, ``hours`` of per-minute usage from ``start``, drawn from ``seed``."""

    start: datetime
    hours: float = 24.0
    count: int = 16
    seed: int = 42

    def usage(self) -> tuple[Usage, list[Item]]:
        rng = np.random.default_rng(self.seed + 23)
        n = max(1, int(self.hours * 60))
        minute = np.arange(n)
        hour = ((self.start.timestamp() / 60 + minute) / 60) % 24
        util = np.empty((self.count, n))
        mem = np.empty((self.count, n))
        items = []
        for w in range(self.count):
            base = rng.uniform(1.0, 6.0)
            peak_hour = rng.uniform(0, 24)  # each service's busy hour of the day
            near = np.minimum(np.abs(hour - peak_hour), 24 - np.abs(hour - peak_hour)) < 1.0
            bursts = (rng.random(n) < np.where(near, 0.25, 0.01)) * rng.uniform(15.0, 35.0, n)
            util[w] = np.clip(base + rng.normal(0, 1.0, n) + bursts, 0.0, 100.0)
            level = rng.uniform(0.06, 0.18) * MEMORY_MIB
            mem[w] = level + (bursts > 0) * rng.uniform(0.0, 0.04) * MEMORY_MIB
            team = TEAMS[w % len(TEAMS)]
            items.append(Item(id=f"sim:serve-{team}-{w:02d}", team=team, gpu_model=MODEL))
        ids = tuple(i.id for i in items)
        return Usage(ids, self.start.timestamp(), 60.0, util, mem), items
