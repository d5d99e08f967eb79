"""Scoring a plan on history it was not made from: the workloads replayed co-located."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpusteward.analysis.consolidation.packing import Plan
from gpusteward.analysis.consolidation.usage import Usage


@dataclass(frozen=True)
class Replay:
    gpus_before: int
    gpus_after: int
    #: Minutes a shared GPU's summed utilisation was over the limit, and GPU-minutes in use.
    contention_minutes: float
    gpu_minutes: float
    #: Minutes a GPU's summed memory was over its memory (a request or a process would have failed).
    memory_violation_minutes: float
    #: Highest summed memory on any GPU, as a share of its memory.
    peak_memory_share: float

    @property
    def saved_share(self) -> float:
        return 1.0 - self.gpus_after / self.gpus_before if self.gpus_before else 0.0

    @property
    def contention_share(self) -> float:
        return self.contention_minutes / self.gpu_minutes if self.gpu_minutes else 0.0


def replay(plan: Plan, usage: Usage, *, gpu_memory_mib: float, util_limit_pct: float = 100.0) -> Replay:
    """Each group of ``plan`` on one GPU through ``usage``: minutes contended (utilisation summed
    over ``util_limit_pct`` while any member is there) and minutes memory did not fit (summed over
    the GPU's whole memory, not the planning limit). A workload the plan does not name, or one
    that never shows up, keeps a GPU of its own."""
    row = {w: i for i, w in enumerate(usage.ids)}
    util, mem, live = np.nan_to_num(usage.util), np.nan_to_num(usage.mem_mib), ~np.isnan(usage.util)
    step_min = usage.step_s / 60.0
    named = {m for g in plan.groups for m in g.members}
    groups = [[row[m] for m in g.members if m in row] for g in plan.groups]
    groups += [[row[w]] for w in usage.ids if w not in named]
    groups = [g for g in groups if g]
    contended = minutes = over_memory = 0.0
    peak = 0.0
    for rows in groups:
        there = live[rows].any(axis=0)
        summed_mem = mem[rows].sum(axis=0)
        contended += float(((util[rows].sum(axis=0) > util_limit_pct) & there).sum()) * step_min
        minutes += float(there.sum()) * step_min
        over_memory += float((summed_mem > gpu_memory_mib).sum()) * step_min
        peak = max(peak, float(summed_mem.max(initial=0.0)))
    return Replay(
        gpus_before=sum(len(g) for g in groups),
        gpus_after=len(groups),
        contention_minutes=contended,
        gpu_minutes=minutes,
        memory_violation_minutes=over_memory,
        peak_memory_share=peak / gpu_memory_mib if gpu_memory_mib else 0.0,
    )
