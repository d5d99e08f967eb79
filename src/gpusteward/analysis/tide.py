"""The tide: low-load windows and replica plans from a demand forecast. Pure functions.

A pool (an inference Deployment, a node group) runs ``replicas`` of ``gpus_per_replica`` GPUs.
Its plan keeps enough replicas for the *upper* edge of the forecast band, with ``slo_headroom``
of their capacity left free, over the look-ahead: the time a new replica needs to come up
(``prewarm_minutes``) plus the time until the plan is made again. So a predicted peak is met
by replicas started ``prewarm_minutes`` before it (pre-warm), and a trough is used only when the
whole look-ahead stays low.

Scaling down is refused when the band's uncertainty (upper less mean) is larger than the
headroom the smaller pool would keep: the forecast is too unsure to give capacity back. It
never goes below ``min_replicas`` nor below what the demand measured now needs. Scaling up is
never held by the band: more capacity is always safe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpusteward.analysis.forecast import Forecast


@dataclass(frozen=True)
class LowWindow:
    """A stretch where the forecast's upper band stays at or under the threshold."""

    start_s: float
    end_s: float
    #: Highest upper band and mean demand inside the window.
    peak_upper: float
    mean: float

    @property
    def minutes(self) -> float:
        return (self.end_s - self.start_s) / 60.0

    def to_dict(self) -> dict[str, float]:
        return {
            "start": self.start_s,
            "end": self.end_s,
            "minutes": round(self.minutes, 1),
            "peak_upper": round(self.peak_upper, 3),
            "mean": round(self.mean, 3),
        }


def low_load_windows(fc: Forecast, threshold: float, *, min_minutes: float = 30.0) -> list[LowWindow]:
    """The runs of buckets whose upper band is at or under ``threshold``, at least ``min_minutes`` long."""
    low = np.asarray(fc.upper <= threshold + 1e-9)
    out = []
    i = 0
    while i < low.size:
        if not low[i]:
            i += 1
            continue
        j = i
        while j < low.size and low[j]:
            j += 1
        start, end = fc.start_s + i * fc.step_s, fc.start_s + j * fc.step_s
        if (end - start) / 60.0 >= min_minutes - 1e-9:
            out.append(LowWindow(start, end, float(fc.upper[i:j].max()), float(fc.mean[i:j].mean())))
        i = j
    return out


@dataclass(frozen=True)
class PoolLimits:
    gpus_per_replica: float = 1.0
    min_replicas: int = 1
    max_replicas: int | None = None
    #: Share of the pool's capacity kept free for the SLO.
    slo_headroom: float = 0.2
    #: How long a new replica takes to serve.
    prewarm_minutes: float = 15.0
    #: How long until the plan is made again (the look-ahead covers it too).
    replan_minutes: float = 15.0

    def usable(self, replicas: int) -> float:
        """GPUs of demand ``replicas`` may carry while keeping the headroom free."""
        return replicas * self.gpus_per_replica * (1.0 - self.slo_headroom)


@dataclass(frozen=True)
class ReplicaPlan:
    pool: str
    current: int
    target: int
    reason: str
    #: Why a change the forecast alone would make is not made ("" when none is held).
    held: str = ""
    #: When the forecast next needs more replicas than ``target`` (pre-warm time), or None.
    next_rise_s: float | None = None

    @property
    def changes(self) -> bool:
        return self.target != self.current

    def to_dict(self) -> dict[str, object]:
        return {
            "pool": self.pool,
            "current": self.current,
            "target": self.target,
            "reason": self.reason,
            "held": self.held,
            "next_rise": self.next_rise_s,
        }


def replicas_for(demand: float, limits: PoolLimits) -> int:
    """The fewest replicas that carry ``demand`` with the headroom free, within the limits."""
    per = limits.usable(1)
    need = math.ceil(max(0.0, demand) / per - 1e-9) if per > 0 else limits.min_replicas
    top = limits.max_replicas if limits.max_replicas is not None else max(need, limits.min_replicas)
    return max(limits.min_replicas, min(need, top))


def plan_replicas(
    pool: str, fc: Forecast, now_s: float, current: int, limits: PoolLimits, *, demand_now: float = 0.0
) -> ReplicaPlan:
    """How many replicas ``pool`` should run from ``now_s`` on, and why."""
    ahead_s = (limits.prewarm_minutes + limits.replan_minutes) * 60.0
    t = fc.times()
    sel = (t + fc.step_s > now_s) & (t < now_s + ahead_s)
    if not sel.any():
        return ReplicaPlan(
            pool, current, current, "the forecast does not cover the next minutes", "no-forecast"
        )
    upper = float(fc.upper[sel].max())
    spread = float((fc.upper[sel] - fc.mean[sel]).max())
    need = max(upper, demand_now)
    target = replicas_for(need, limits)
    minutes = ahead_s / 60.0
    per = limits.gpus_per_replica
    why = (
        f"forecast up to {upper:.1f} GPUs (upper {100 * fc.level:.0f}% band) over the next {minutes:.0f} min"
        f"{f', {demand_now:.1f} now' if demand_now > 0 else ''}; {target} replica(s) of {per:g} GPUs keep "
        f"{100 * limits.slo_headroom:.0f}% headroom"
    )
    rise = _next_rise(fc, now_s + ahead_s, target, limits)
    if target < current:
        room = target * per * limits.slo_headroom
        if spread > room + 1e-9:
            reason = (
                f"{why}, but the band's uncertainty ({spread:.1f} GPUs) exceeds the "
                f"{room:.1f} GPUs of headroom {target} replica(s) would keep: staying at {current}"
            )
            return ReplicaPlan(pool, current, current, reason, "uncertain", rise)
        return ReplicaPlan(
            pool, current, target, f"{why}: scale down {current} → {target} (trough)", "", rise
        )
    if target > current:
        return ReplicaPlan(
            pool, current, target, f"{why}: scale up {current} → {target} (pre-warm)", "", rise
        )
    return ReplicaPlan(pool, current, current, f"{why}: stay at {current}", "", rise)


def _next_rise(fc: Forecast, after_s: float, replicas: int, limits: PoolLimits) -> float | None:
    """When replicas must start so that ``replicas`` no longer being enough is met in time."""
    cap = limits.usable(replicas)
    t = fc.times()
    over = np.flatnonzero((t >= after_s) & (fc.upper > cap + 1e-9))
    if over.size == 0:
        return None
    return float(t[over[0]] - limits.prewarm_minutes * 60.0)
