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
#: Cells per block of rows (about 8 MB of float64 and its index array).
_BLOCK_CELLS = 1 << 19


def counter_increase(view: WindowView, m: Metric, duration_s: float) -> FloatArray:
    """Per GPU, the counter's increase over the last ``duration_s``; NaN with fewer than two
    present samples (one reading says nothing about growth)."""
    rng = view._range(m, duration_s)
    if rng is None:
        return np.full(view.n_gpus, np.nan)

    def run() -> FloatArray:
        # Blocks of rows, each done at once: a node's 8 GPUs take the whole window in one block
        # (row by row it was 1,260 small numpy calls a tick), 100,000 GPUs about 10 rows.
        n = view.n_gpus
        prev = np.full(n, np.nan)
        total = np.zeros(n)
        pairs = np.zeros(n, dtype=np.int64)
        ring, step_rows = view._rings[m], max(1, _BLOCK_CELLS // max(n, 1))
        for r0, r1, _ in view._segments(*rng):
            for b0 in range(r0, r1, step_rows):
                block = ring[b0 : min(b0 + step_rows, r1)].astype(np.float64)
                # Each cell's previous present value: forward-filled down the block from prev.
                filled = np.vstack([prev[None, :], block])
                rows = np.where(np.isnan(filled), 0, np.arange(filled.shape[0])[:, None])
                np.maximum.accumulate(rows, axis=0, out=rows)
                before = np.take_along_axis(filled, rows[:-1], axis=0)
                step = ~np.isnan(block) & ~np.isnan(before)
                # Growth, or after a reset (a drop) the new value itself.
                with np.errstate(invalid="ignore"):
                    grew = np.where(block >= before, block - before, block)
                total += np.where(step, grew, 0.0).sum(axis=0)
                pairs += step.sum(axis=0)
                prev = np.take_along_axis(filled, rows[-1:], axis=0)[0]
        out: FloatArray = np.where(pairs > 0, total, np.nan)
        return out

    return view._memoised(("increase", m, rng), run)
