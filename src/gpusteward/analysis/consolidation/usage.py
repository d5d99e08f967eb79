"""Every workload's utilisation and memory on one time grid, so demands can be added up."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Usage:
    """``util[w, k]`` (%) and ``mem_mib[w, k]`` of workload ``ids[w]`` in grid bin ``k``, which
    starts at ``start + k * step_s``. NaN: the workload was not there (or had no sample)."""

    ids: tuple[str, ...]
    start: float
    step_s: float
    util: F64
    mem_mib: F64

    @property
    def bins(self) -> int:
        return int(self.util.shape[1])

    def present(self) -> npt.NDArray[np.bool_]:
        """Which workloads have any sample in this stretch."""
        present: npt.NDArray[np.bool_] = np.any(~np.isnan(self.util), axis=1)
        return present

    def between(self, lo_s: float, hi_s: float) -> Usage:
        """The bins from ``lo_s`` to ``hi_s`` seconds after ``start``."""
        lo = max(0, int(lo_s // self.step_s))
        hi = min(self.bins, max(lo, int(hi_s // self.step_s)))
        return Usage(
            self.ids, self.start + lo * self.step_s, self.step_s, self.util[:, lo:hi], self.mem_mib[:, lo:hi]
        )

    def hour_of_day(self, tz_offset_s: float = 0.0) -> npt.NDArray[np.int64]:
        """The hour of day (0-23) each bin starts in."""
        t = self.start + np.arange(self.bins) * self.step_s + tz_offset_s
        return ((t % 86400) // 3600).astype(np.int64)


def to_grid(
    t: npt.ArrayLike,
    workload: npt.ArrayLike,
    util: npt.ArrayLike,
    mem_mib: npt.ArrayLike | None,
    ids: tuple[str, ...],
    *,
    start: float,
    end: float,
    step_s: float = 60.0,
    fill_bins: int = 2,
) -> Usage:
    """Samples (time, workload index, util %, memory MiB) on a grid of ``step_s`` bins.

    A bin keeps the highest reading in it (a contention or an out-of-memory is about the peak).
    Samples taken a little less often than the grid leave empty bins; each reading also speaks
    for up to ``fill_bins`` empty bins after it, so a missed bin is not read as "not there".
    """
    ta = np.asarray(t, dtype=np.float64)
    wa = np.asarray(workload, dtype=np.int64)
    ua = np.asarray(util, dtype=np.float64)
    ma = np.full_like(ua, np.nan) if mem_mib is None else np.asarray(mem_mib, dtype=np.float64)
    n = max(1, int(np.ceil((end - start) / step_s)))
    keep = (wa >= 0) & (wa < len(ids)) & (ta >= start) & (ta < end)
    k = ((ta[keep] - start) // step_s).astype(np.int64)
    w = wa[keep]
    grid_u = np.full((len(ids), n), np.nan)
    grid_m = np.full((len(ids), n), np.nan)
    np.fmax.at(grid_u, (w, k), ua[keep])
    np.fmax.at(grid_m, (w, k), ma[keep])
    for grid in (grid_u, grid_m):
        for _ in range(fill_bins):
            gap = np.isnan(grid[:, 1:]) & ~np.isnan(grid[:, :-1])
            grid[:, 1:][gap] = grid[:, :-1][gap]
    return Usage(ids, start, step_s, grid_u, grid_m)
