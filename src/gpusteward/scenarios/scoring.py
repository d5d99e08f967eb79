"""How a backtest judges a stop against what the trace shows happened next.

The contract (issue 14), each number a setting:

* a **false kill** is a stop (L2+) of a workload whose trace shows at least ``busy_samples``
  samples at ``busy_pct`` % utilisation or more within ``horizon_s`` after the stop. An
  inference pod at 3 % duty cycle is serving requests, so the bar is low on purpose;
* **reclaimed** GPU-hours run from the stop to the workload's last sample, times its GPUs,
  for stops that are not false kills; a workload counts once, at its first stop;
* the **oracle** stops every workload at the earliest sample where a stop is not a false kill:
  the most any causal policy could reclaim under the same contract.

Pure: a ``Trace`` and numbers in, numbers out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpusteward.integrations.replay import Trace


@dataclass(frozen=True, slots=True)
class Scoring:
    """What makes a stop a false kill."""

    busy_pct: float = 1.0
    busy_samples: int = 10
    horizon_s: float = 6 * 3600.0

    def describe(self) -> str:
        return f">= {self.busy_samples} samples at >= {self.busy_pct:g} % within {self.horizon_s / 3600:g} h"


#: The contract's defaults.
DEFAULT_SCORING = Scoring()


class Scorer:
    """Per-workload time-ordered samples of ``trace`` with prefix counts of busy ones."""

    def __init__(self, trace: Trace, scoring: Scoring = DEFAULT_SCORING) -> None:
        self.trace = trace
        self.scoring = scoring
        self._cache: dict[int, tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]] = {}

    def _series(self, w: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
        """Sample times of ``w`` (all its GPUs, present values only) and the busy prefix count."""
        hit = self._cache.get(w)
        if hit is None:
            tr = self.trace
            rows = tr.rows_of(w)
            rows = rows[~np.isnan(tr.util[rows])]
            rows = rows[np.argsort(tr.t[rows], kind="stable")]
            busy = tr.util[rows] >= self.scoring.busy_pct
            hit = (tr.t[rows].astype(np.float64), np.concatenate(([0], np.cumsum(busy, dtype=np.int64))))
            self._cache[w] = hit
        return hit

    def busy_after(self, w: int, at: float) -> int:
        """Busy samples of ``w`` with ``at < t <= at + horizon``."""
        t, cum = self._series(w)
        lo = int(np.searchsorted(t, at, side="right"))
        hi = int(np.searchsorted(t, at + self.scoring.horizon_s, side="right"))
        return int(cum[hi] - cum[lo])

    def false_kill(self, w: int, at: float) -> bool:
        return self.busy_after(w, at) >= self.scoring.busy_samples

    def last_sample(self, w: int) -> float:
        t, _ = self._series(w)
        return float(t[-1]) if t.size else self.trace.workloads[w].last_t

    def gpus(self, w: int) -> int:
        return max(1, len(self.trace.workloads[w].gpus))

    def reclaimed_gpu_hours(self, w: int, at: float) -> float:
        """GPU-hours a stop at ``at`` gives back: nothing for a false kill."""
        if self.false_kill(w, at):
            return 0.0
        return max(0.0, self.last_sample(w) - at) / 3600.0 * self.gpus(w)

    def oracle_stop(self, w: int) -> float | None:
        """The earliest sample time at which stopping ``w`` is not a false kill."""
        t, cum = self._series(w)
        if t.size == 0:
            return None
        after = cum[np.searchsorted(t, t + self.scoring.horizon_s, side="right")] - cum[1:]
        ok = np.flatnonzero(after < self.scoring.busy_samples)
        return float(t[ok[0]]) if ok.size else None

    def oracle_gpu_hours(self) -> float:
        total = 0.0
        for w in range(len(self.trace.workloads)):
            at = self.oracle_stop(w)
            if at is not None:
                total += max(0.0, self.last_sample(w) - at) / 3600.0 * self.gpus(w)
        return total
