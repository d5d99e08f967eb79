"""A GPU trace in memory: one row per GPU per sample, columnar numpy arrays sorted by time.

Loaders (``generic``, ``philly``, ``helios``) build a ``Trace``; ``ReplaySource`` reads it
forward in (simulated) time, and the backtest looks ahead in it to judge the actions taken.
A missing value is NaN, never 0. A sample speaks for the time up to its GPU's next sample,
unless that next sample is more than ``GAP_INTERVALS`` intervals away: then for one interval,
and the rest is a gap (missing data, not idleness).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from gpusteward.domain.models import Gpu, Owner

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
Idx = npt.NDArray[np.intp]

#: A sample further than this many median intervals from the next one ends before a gap.
GAP_INTERVALS = 3.0
#: Utilisation (%) at or above which a GPU counts as busy, below which as idle.
BUSY_PCT = 10.0
#: The times a trace may hold (epoch seconds, 1970 to 2200). Outside is junk or a typo, and far
#: outside float seconds stop counting (``1e23 + 60 == 1e23``): a replay loop would never end.
MIN_T = 0.0
MAX_T = datetime(2200, 1, 1, tzinfo=UTC).timestamp()
#: The longest trace a replay plays (about three years): a backtest ticks through all of it.
MAX_SPAN_S = 3 * 366 * 86400.0
#: The most GPUs a trace may describe (a trace allocates per GPU).
MAX_GPUS = 1_000_000


def time_problem(t: float) -> str | None:
    """Why ``t`` (epoch seconds) cannot be a trace time, or None when it can."""
    if MIN_T <= t <= MAX_T:  # False for NaN too
        return None
    return f"{t!r} is not a time between 1970 and 2200 (epoch seconds or RFC 3339)"


def span_problem(first: float, last: float) -> str | None:
    """Why a trace from ``first`` to ``last`` is too long to replay, or None."""
    if last - first <= MAX_SPAN_S:
        return None
    return (
        f"the trace spans {(last - first) / 86400:.0f} days; at most {MAX_SPAN_S / 86400:.0f} can be replayed"
    )


@dataclass(frozen=True, slots=True)
class TraceWorkload:
    """A workload as the trace shows it: it holds its GPUs from its first to its last sample."""

    id: str
    name: str
    owner: Owner
    #: Indices into ``Trace.gpus`` of every GPU it ever had samples on.
    gpus: tuple[int, ...]
    #: Epoch seconds: when it started (its own column, else its first sample).
    started_at: float
    first_t: float
    last_t: float
    gpus_requested: int = 0
    #: What the trace says the workload is (its ``class`` column); empty: it does not say.
    workload_class: str = ""

    @property
    def requested(self) -> int:
        return self.gpus_requested or len(self.gpus)


def _f32(a: npt.ArrayLike | None, n: int) -> F32 | None:
    if a is None:
        return None
    out = np.asarray(a, dtype=np.float32)
    if out.shape != (n,):
        raise ValueError(f"column of length {out.shape} for {n} rows")
    return out


class Trace:
    """Rows sorted by time; ``gpu`` and ``wl`` index ``gpus`` and ``workloads`` (``wl`` -1: unheld)."""

    def __init__(
        self,
        *,
        name: str,
        gpus: Sequence[Gpu],
        t: npt.ArrayLike,
        gpu: npt.ArrayLike,
        util: npt.ArrayLike,
        wl: npt.ArrayLike,
        workloads: Sequence[TraceWorkload],
        mem: npt.ArrayLike | None = None,
        power: npt.ArrayLike | None = None,
        sm: npt.ArrayLike | None = None,
        interval_s: float | None = None,
        presorted: bool = False,
    ) -> None:
        self.name = name
        self.gpus = tuple(gpus)
        self.workloads = tuple(workloads)
        t64 = np.asarray(t, dtype=np.float64)
        n = t64.shape[0]
        order = None if presorted else np.argsort(t64, kind="stable")
        cols: dict[str, npt.NDArray[np.generic] | None] = {
            "t": t64,
            "gpu": np.asarray(gpu, dtype=np.int32),
            "wl": np.asarray(wl, dtype=np.int32),
            "util": _f32(util, n),
            "mem": _f32(mem, n),
            "power": _f32(power, n),
            "sm": _f32(sm, n),
        }
        for key, col in cols.items():
            if col is not None and col.shape != (n,):
                raise ValueError(f"{key}: {col.shape[0]} values for {n} rows")
            if col is not None and order is not None:
                cols[key] = col[order]
        self.t: F64 = cols["t"]  # type: ignore[assignment]
        self.gpu: I32 = cols["gpu"]  # type: ignore[assignment]
        self.wl: I32 = cols["wl"]  # type: ignore[assignment]
        self.util: F32 = cols["util"]  # type: ignore[assignment]
        self.mem: F32 | None = cols["mem"]  # type: ignore[assignment]
        self.power: F32 | None = cols["power"]  # type: ignore[assignment]
        self.sm: F32 | None = cols["sm"]  # type: ignore[assignment]
        if n and (self.gpu.min() < 0 or self.gpu.max() >= len(self.gpus)):
            raise ValueError("a row names a GPU index outside the GPU table")
        if n and self.wl.max() >= len(self.workloads):
            raise ValueError("a row names a workload index outside the workload table")
        self.interval_s = float(interval_s) if interval_s else self._median_interval()
        self._wl_first = np.array([w.first_t for w in self.workloads], dtype=np.float64)
        self._wl_last = np.array([w.last_t for w in self.workloads], dtype=np.float64)
        self._span: F32 | None = None
        self._by_wl: tuple[Idx, Idx] | None = None

    # --- shape ------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.t.shape[0])

    @property
    def start(self) -> float:
        return float(self.t[0]) if len(self) else 0.0

    @property
    def end(self) -> float:
        """The end of the last sample's interval."""
        return float(self.t[-1]) + self.interval_s if len(self) else 0.0

    @property
    def gap_s(self) -> float:
        return GAP_INTERVALS * self.interval_s

    def with_gpus(self, gpus: Sequence[Gpu]) -> Trace:
        """The same trace with another GPU table (prices filled in, say), same order."""
        if [g.uuid for g in gpus] != [g.uuid for g in self.gpus]:
            raise ValueError("with_gpus keeps the GPUs and their order")
        out = copy.copy(self)  # shares the (read-only) arrays
        out.gpus = tuple(gpus)
        return out

    def head(self, seconds: float) -> Trace:
        """The rows of the first ``seconds`` (same GPU and workload tables): a short run to time
        before a long one."""
        n = int(np.searchsorted(self.t, self.start + seconds, side="left"))
        return Trace(
            name=self.name,
            gpus=self.gpus,
            t=self.t[:n],
            gpu=self.gpu[:n],
            util=self.util[:n],
            wl=self.wl[:n],
            workloads=self.workloads,
            mem=None if self.mem is None else self.mem[:n],
            power=None if self.power is None else self.power[:n],
            sm=None if self.sm is None else self.sm[:n],
            interval_s=self.interval_s,
            presorted=True,
        )

    def _median_interval(self) -> float:
        if len(self) < 2:
            return 60.0
        order = np.lexsort((self.t, self.gpu))
        t, g = self.t[order], self.gpu[order]
        d = np.diff(t)[g[1:] == g[:-1]]
        d = d[d > 0]
        return float(np.median(d)) if d.size else 60.0

    # --- per-row coverage ---------------------------------------------------------------

    @property
    def span_s(self) -> F32:
        """Seconds each sample speaks for (see the module docstring)."""
        if self._span is None:
            span = np.full(len(self), self.interval_s, dtype=np.float32)
            if len(self) > 1:
                order = np.lexsort((self.t, self.gpu))
                t, g = self.t[order], self.gpu[order]
                d = np.diff(t)
                ok = (g[1:] == g[:-1]) & (d <= self.gap_s)
                part = np.full(len(self), self.interval_s, dtype=np.float64)
                part[:-1][ok] = d[ok]
                span[order] = part
            self._span = span
        return self._span

    # --- reading forward ----------------------------------------------------------------

    def rows_between(self, after: float, until: float) -> slice:
        """Rows with ``after < t <= until``."""
        lo = int(np.searchsorted(self.t, after, side="right"))
        hi = int(np.searchsorted(self.t, until, side="right"))
        return slice(lo, max(lo, hi))

    def next_time_after(self, at: float) -> float | None:
        i = int(np.searchsorted(self.t, at, side="right"))
        return float(self.t[i]) if i < len(self) else None

    def running(self, at: float) -> Idx:
        """Indices of the workloads holding their GPUs at ``at`` (first sample <= at <= last)."""
        return np.flatnonzero((self._wl_first <= at) & (at <= self._wl_last))

    def any_running_between(self, after: float, until: float) -> bool:
        return bool(np.any((self._wl_first <= until) & (after <= self._wl_last)))

    # --- looking at one workload ----------------------------------------------------------

    def rows_of(self, w: int) -> Idx:
        """Row indices of workload ``w``, in time order."""
        if self._by_wl is None:
            order = np.argsort(self.wl, kind="stable")  # stable: time order within a workload
            bounds = np.searchsorted(self.wl[order], np.arange(len(self.workloads) + 1), side="left")
            self._by_wl = (order.astype(np.intp), bounds.astype(np.intp))
        order, bounds = self._by_wl
        return order[bounds[w] : bounds[w + 1]]

    def end_of(self, w: int) -> float:
        """When workload ``w``'s last sample interval ends."""
        rows = self.rows_of(w)
        return float((self.t[rows] + self.span_s[rows]).max()) if rows.size else self.workloads[w].last_t

    def busy_again_after(
        self, w: int, at: float, *, busy_pct: float = BUSY_PCT, min_s: float = 300.0
    ) -> float | None:
        """Start of the first run of samples at ``busy_pct`` or more lasting ``min_s`` on any of
        ``w``'s GPUs after ``at``, or None. Missing samples neither extend nor break a run;
        a gap does break it."""
        rows = self.rows_of(w)
        rows = rows[self.t[rows] > at]
        rows = rows[~np.isnan(self.util[rows])]
        if rows.size == 0:
            return None
        rows = rows[np.lexsort((self.t[rows], self.gpu[rows]))]
        g, t, span = self.gpu[rows], self.t[rows], self.span_s[rows].astype(np.float64)
        busy = self.util[rows] >= busy_pct
        brk = np.ones(rows.size, dtype=np.bool_)
        brk[1:] = (g[1:] != g[:-1]) | (np.diff(t) > self.gap_s) | ~busy[:-1]
        starts = np.flatnonzero(busy & brk)
        if starts.size == 0:
            return None
        busy_rows = np.flatnonzero(busy)
        run = np.cumsum(busy & brk)[busy_rows]
        last = np.r_[run[1:] != run[:-1], True]
        ends = t[busy_rows[last]] + span[busy_rows[last]]
        begin = t[starts]
        long_enough = begin[ends - begin >= min_s - 1e-6]
        return float(long_enough.min()) if long_enough.size else None

    def idle_since(self, w: int, at: float, *, busy_pct: float = BUSY_PCT) -> float:
        """Since when every GPU of ``w`` has been under ``busy_pct`` up to ``at``: the latest end
        of a busy sample on any of its GPUs (``at`` if that is still running), else its first sample."""
        rows = self.rows_of(w)
        rows = rows[: int(np.searchsorted(self.t[rows], at, side="right"))]
        busy = rows[self.util[rows] >= busy_pct]
        first = self.workloads[w].first_t
        if busy.size == 0:
            return first
        return min(at, max(first, float((self.t[busy] + self.span_s[busy]).max())))

    # --- totals ---------------------------------------------------------------------------

    def held_gpu_hours(self) -> float:
        held = (self.wl >= 0) & ~np.isnan(self.util)
        return float(self.span_s[held].sum(dtype=np.float64)) / 3600.0

    def idle_gpu_hours(self, *, busy_pct: float = BUSY_PCT) -> float:
        """GPU-hours that workloads held their GPUs under ``busy_pct`` (missing samples excluded)."""
        idle = (self.wl >= 0) & (self.util < busy_pct)
        return float(self.span_s[idle].sum(dtype=np.float64)) / 3600.0
