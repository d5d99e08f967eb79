"""Trend aggregates over the window for GPU health: how much a counter grew.

``increase(m, d)`` is the growth of a monotonic counter (ECC errors, PCIe replays, retired
pages) over the present samples of the last ``d``, Prometheus style: a drop means the counter
was reset (the driver reloaded), so the growth after it counts from zero. One pass row by row
over the ring, vectorised over every GPU. ``slope(m, d)`` is the view's least-squares slope.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusteward.domain.models import Metric
from gpusteward.store.window_view import WindowView

FloatArray = npt.NDArray[np.float64]


def counter_increase(view: WindowView, m: Metric, duration_s: float) -> FloatArray:
    """Per GPU, the counter's increase over the last ``duration_s``; NaN with fewer than two
    present samples (one reading says nothing about growth)."""
    rng = view._range(m, duration_s)
    if rng is None:
        return np.full(view.n_gpus, np.nan)

    def run() -> FloatArray:
        prev = np.full(view.n_gpus, np.nan)
        total = np.zeros(view.n_gpus)
        pairs = np.zeros(view.n_gpus, dtype=np.int64)
        ring = view._rings[m]
        for r0, r1, _ in view._segments(*rng):
            for row in ring[r0:r1].astype(np.float64):
                step = ~np.isnan(row) & ~np.isnan(prev)
                # Growth, or after a reset (a drop) the new value itself.
                grew = np.where(row >= prev, row - prev, row)
                total += np.where(step, grew, 0.0)
                pairs += step
                prev = np.where(np.isnan(row), prev, row)
        out: FloatArray = np.where(pairs > 0, total, np.nan)
        return out

    return view._memoised(("increase", m, rng), run)
