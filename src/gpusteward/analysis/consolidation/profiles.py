"""What each workload really uses: distributions by hour of day, bursts, and which bursts coincide."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.consolidation.usage import Usage

F64 = npt.NDArray[np.float64]

#: The quantiles a profile keeps per hour of day.
QUANTILES = (50.0, 95.0, 100.0)


@dataclass(frozen=True)
class Profile:
    """One workload over a stretch of history. Per-hour arrays are 24 x len(QUANTILES)
    (p50, p95, max), NaN for hours the history does not cover."""

    id: str
    minutes: float
    util_by_hour: F64
    mem_mib_by_hour: F64
    util_p95: float
    util_mean: float
    mem_mib_p95: float
    mem_mib_peak: float
    #: Share of its minutes at or above the busy threshold.
    busy_share: float
    #: Lengths of its bursts (runs of busy bins), in minutes: median and p95 (0: none).
    burst_minutes_p50: float
    burst_minutes_p95: float
    bursts: int


def _quantiles(x: F64) -> F64:
    x = x[~np.isnan(x)]
    if x.size == 0:
        return np.full(len(QUANTILES), np.nan)
    return np.percentile(x, QUANTILES).astype(np.float64)


def _runs(busy: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """Lengths of the runs of True."""
    edges = np.diff(np.r_[0, busy.astype(np.int8), 0])
    return (np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)).astype(np.int64)


def profiles(usage: Usage, *, busy_pct: float = 10.0, tz_offset_s: float = 0.0) -> list[Profile]:
    """A profile per workload present in ``usage`` (absent ones are left out)."""
    hours = usage.hour_of_day(tz_offset_s)
    step_min = usage.step_s / 60.0
    out = []
    for w in np.flatnonzero(usage.present()):
        u, m = usage.util[w], usage.mem_mib[w]
        seen = ~np.isnan(u)
        by_u = np.stack([_quantiles(u[hours == h]) for h in range(24)])
        by_m = np.stack([_quantiles(m[hours == h]) for h in range(24)])
        runs = _runs(np.nan_to_num(u) >= busy_pct)
        with warnings.catch_warnings():  # a workload may have no memory column at all
            warnings.simplefilter("ignore", RuntimeWarning)
            mem_p95 = float(np.nanpercentile(m, 95)) if np.any(~np.isnan(m)) else 0.0
            mem_peak = float(np.nanmax(m)) if np.any(~np.isnan(m)) else 0.0
        out.append(
            Profile(
                id=usage.ids[w],
                minutes=float(seen.sum()) * step_min,
                util_by_hour=by_u,
                mem_mib_by_hour=by_m,
                util_p95=float(np.percentile(u[seen], 95)),
                util_mean=float(u[seen].mean()),
                mem_mib_p95=mem_p95,
                mem_mib_peak=mem_peak,
                busy_share=float((u[seen] >= busy_pct).mean()),
                burst_minutes_p50=float(np.median(runs)) * step_min if runs.size else 0.0,
                burst_minutes_p95=float(np.percentile(runs, 95)) * step_min if runs.size else 0.0,
                bursts=int(runs.size),
            )
        )
    return out


def burst_cooccurrence(usage: Usage, *, busy_pct: float = 10.0) -> F64:
    """``lift[i, j]``: how much more often i and j are busy in the same bin than chance says
    (P(both) / (P(i) P(j)), over the bins where both are there). 1: independent; 0: never together;
    NaN: never both there, or one never busy."""
    there = ~np.isnan(usage.util)
    busy = (np.nan_to_num(usage.util) >= busy_pct) & there
    b, t = busy.astype(np.float64), there.astype(np.float64)
    both_there = t @ t.T
    with np.errstate(invalid="ignore", divide="ignore"):
        p_both = (b @ b.T) / both_there
        p_i = (b @ t.T) / both_there  # i busy, over the bins both are there
        lift = p_both / (p_i * p_i.T)
    lift[~np.isfinite(lift)] = np.nan
    return lift
