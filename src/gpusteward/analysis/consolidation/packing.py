"""Packing workloads onto shared GPUs: time-aware (their joint demand over the history must fit)
and the naive baseline (peaks and p95s added up, as if every burst came at once).

Memory is a hard limit: a GPU that runs out of memory fails a request (or the process). Utilisation
is a soft one: above 100 % the co-located services only wait for each other, so a plan may allow
a bounded share of contended minutes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.consolidation.usage import Usage

F64 = npt.NDArray[np.float64]
Sharing = Literal["time-slicing", "mps"]


@dataclass(frozen=True)
class Item:
    """A workload that holds one whole GPU today, with what constrains where it may go."""

    id: str
    team: str = ""
    gpu_model: str = ""
    #: Protected or out of scope: it keeps its GPU to itself.
    pinned: bool = False
    #: Anti-affinity keys: two workloads sharing a key never share a GPU (replicas of one service).
    anti_affinity: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PackSettings:
    #: Memory of one GPU of the pool (MiB).
    gpu_memory_mib: float = 81920.0
    #: Share of the memory kept free: co-located demand must stay under (1 - margin) x memory.
    memory_margin: float = 0.10
    #: Utilisation above which a shared GPU counts as contended (%).
    util_limit_pct: float = 100.0
    #: Most share of a shared GPU's minutes that may be contended in the history (time-aware).
    contention_share_max: float = 0.005
    #: The memory level a workload is taken to sit at, besides its spikes (percentile).
    memory_quantile: float = 95.0
    #: Teams that may share a GPU with other teams ("*": every team).
    mixing_teams: frozenset[str] = frozenset()
    #: Most workloads on one GPU (time-slicing replicas the device plugin advertises).
    max_per_gpu: int = 8
    sharing: Sharing = "time-slicing"

    @property
    def memory_limit_mib(self) -> float:
        return self.gpu_memory_mib * (1.0 - self.memory_margin)


@dataclass(frozen=True)
class Group:
    """Workloads that go together on one GPU."""

    members: tuple[str, ...]
    mode: str
    #: Share of the history's minutes this group would have been contended (util summed over the limit).
    contention_share: float = 0.0
    #: Highest memory the group's members held together in the history (MiB).
    peak_memory_mib: float = 0.0
    #: MIG instance profiles, one per member, when mode is "mig".
    mig_profiles: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    method: str
    groups: tuple[Group, ...]
    #: Why workloads were left on their own GPU (pinned, no history), by id.
    kept: dict[str, str] = field(default_factory=dict)

    @property
    def gpus_before(self) -> int:
        return sum(len(g.members) for g in self.groups)

    @property
    def gpus_after(self) -> int:
        return len(self.groups)

    def group_of(self) -> dict[str, int]:
        return {m: i for i, g in enumerate(self.groups) for m in g.members}


def _compatible(members: Sequence[Item], item: Item, cfg: PackSettings) -> bool:
    """Constraints that hold whatever the demand: model, team, anti-affinity, count."""
    if len(members) >= cfg.max_per_gpu:
        return False
    for other in members:
        if other.gpu_model != item.gpu_model or other.anti_affinity & item.anti_affinity:
            return False
        mixing = "*" in cfg.mixing_teams or (other.team in cfg.mixing_teams and item.team in cfg.mixing_teams)
        if other.team != item.team and not mixing:
            return False
    return True


class _Bin:
    """A GPU being filled: its members and what they add up to."""

    def __init__(self, bins: int) -> None:
        self.rows: list[int] = []
        self.items: list[Item] = []
        self.util = np.zeros(bins)
        self.mem = np.zeros(bins)
        self.live = np.zeros(bins, dtype=np.bool_)
        self.level = self.spike = self.p95 = 0.0


Fits = Callable[[_Bin, int], bool]


def _first_fit(
    usage: Usage,
    items: Sequence[Item],
    order: Sequence[int],
    level: F64,
    spike: F64,
    p95: F64,
    fits: Fits,
    cfg: PackSettings,
) -> list[_Bin]:
    util, mem, live = np.nan_to_num(usage.util), np.nan_to_num(usage.mem_mib), ~np.isnan(usage.util)
    bins: list[_Bin] = []
    for w in order:
        home = next((b for b in bins if _compatible(b.items, items[w], cfg) and fits(b, w)), None)
        if home is None:
            home = _Bin(usage.bins)
            bins.append(home)
        home.rows.append(w)
        home.items.append(items[w])
        home.util += util[w]
        home.mem += mem[w]
        home.live |= live[w]
        home.level += float(level[w])
        home.spike = max(home.spike, float(spike[w]))
        home.p95 += float(p95[w])
    return bins


def _movable(usage: Usage, items: Sequence[Item]) -> tuple[list[int], dict[str, str]]:
    if tuple(i.id for i in items) != usage.ids:
        raise ValueError("one item per workload of the usage, in its order")
    present = usage.present()
    kept = {}
    movable = []
    for w, item in enumerate(items):
        if item.pinned:
            kept[item.id] = "pinned (protected or out of scope)"
        elif not present[w]:
            kept[item.id] = "no history to plan from"
        else:
            movable.append(w)
    return movable, kept


def _plan(
    usage: Usage,
    items: Sequence[Item],
    bins: list[_Bin],
    kept: dict[str, str],
    cfg: PackSettings,
    method: str,
) -> Plan:
    util, mem = np.nan_to_num(usage.util), np.nan_to_num(usage.mem_mib)
    live_all = ~np.isnan(usage.util)
    groups = []
    for b in bins:
        rows = b.rows
        live = live_all[rows].any(axis=0)
        share = float(((util[rows].sum(axis=0) > cfg.util_limit_pct) & live).sum() / max(1, live.sum()))
        mode = cfg.sharing if len(rows) > 1 else "dedicated"
        groups.append(
            Group(tuple(i.id for i in b.items), mode, share, float(mem[rows].sum(axis=0).max(initial=0.0)))
        )
    groups += [Group((i,), "dedicated") for i in kept]
    return Plan(method, tuple(groups), kept)


def plan_naive(usage: Usage, items: Sequence[Item], cfg: PackSettings) -> Plan:
    """First-fit decreasing by peak memory: a GPU takes a workload while the members' peak
    memory adds up to under the limit and their p95 utilisation to under ``util_limit_pct``."""
    movable, kept = _movable(usage, items)
    peak = _stat(usage.mem_mib, 100.0)
    p95 = _stat(usage.util, 95.0)

    def fits(b: _Bin, w: int) -> bool:
        return bool(b.level + peak[w] <= cfg.memory_limit_mib and b.p95 + p95[w] <= cfg.util_limit_pct)

    order = sorted(movable, key=lambda w: (-peak[w], items[w].id))
    bins = _first_fit(usage, items, order, peak, np.zeros_like(peak), p95, fits, cfg)
    return _plan(usage, items, bins, kept, cfg, "naive")


def _stat(x: F64, q: float) -> F64:
    """Each row's ``q`` percentile over its readings (0 for a row without any)."""
    out = np.zeros(x.shape[0])
    for w, row in enumerate(x):
        seen = row[~np.isnan(row)]
        if seen.size:
            out[w] = float(np.percentile(seen, q))
    return out


def plan_time_aware(usage: Usage, items: Sequence[Item], cfg: PackSettings) -> Plan:
    """First-fit decreasing by usual memory. A GPU takes a workload when, over the history:

    - memory: the members' memory added up minute by minute stays under the limit, and so does
      their usual level (``memory_quantile``) added up plus the largest spike above it of any
      one member: spikes that never met in the history may still meet once, one at a time;
    - utilisation: the members' utilisation added up minute by minute is over ``util_limit_pct``
      in at most ``contention_share_max`` of the minutes any of them is there. Services whose
      bursts never coincide share; two that burst together do not.
    """
    movable, kept = _movable(usage, items)
    level = _stat(usage.mem_mib, cfg.memory_quantile)
    spike = _stat(usage.mem_mib, 100.0) - level
    util, mem, live = np.nan_to_num(usage.util), np.nan_to_num(usage.mem_mib), ~np.isnan(usage.util)

    def fits(b: _Bin, w: int) -> bool:
        if b.level + level[w] + max(b.spike, spike[w]) > cfg.memory_limit_mib:
            return False
        if float((b.mem + mem[w]).max(initial=0.0)) > cfg.memory_limit_mib:
            return False
        there = b.live | live[w]
        over = ((b.util + util[w]) > cfg.util_limit_pct) & there
        return float(over.sum()) <= cfg.contention_share_max * max(1, int(there.sum()))

    order = sorted(movable, key=lambda w: (-level[w], items[w].id))
    bins = _first_fit(usage, items, order, level, spike, np.zeros_like(level), fits, cfg)
    return _plan(usage, items, bins, kept, cfg, "time-aware")
