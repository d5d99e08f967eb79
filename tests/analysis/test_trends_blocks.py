"""``counter_increase`` works on blocks of rows; it must give what the plain row-by-row pass
gives (kept here as the reference), for any block size, across the ring's wrap, with gaps,
resets and GPUs that have one reading or none."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusteward.analysis import trends
from gpusteward.domain.models import Metric
from gpusteward.store.window import WindowStore
from gpusteward.store.window_view import WindowView

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
M = Metric.ECC_SBE


def _reference(view: WindowView, duration_s: float) -> np.ndarray:
    rng = view._range(M, duration_s)
    if rng is None:  # nothing ever stored
        return np.full(view.n_gpus, np.nan)
    prev, total = np.full(view.n_gpus, np.nan), np.zeros(view.n_gpus)
    pairs = np.zeros(view.n_gpus, dtype=np.int64)
    for r0, r1, _ in view._segments(*rng):
        for row in view._rings[M][r0:r1].astype(np.float64):
            step = ~np.isnan(row) & ~np.isnan(prev)
            grew = np.where(row >= prev, row - prev, row)
            total += np.where(step, grew, 0.0)
            pairs += step
            prev = np.where(np.isnan(row), prev, row)
    return np.where(pairs > 0, total, np.nan)


cells = st.one_of(st.none(), st.integers(0, 50).map(float))


@settings(max_examples=80, deadline=None)
@given(
    grid=st.lists(st.lists(cells, min_size=3, max_size=3), min_size=1, max_size=40),
    block=st.sampled_from([1, 2, 3, 5, 7, 1 << 19]),
    minutes=st.integers(1, 30),
)
def test_blocks_give_the_row_by_row_answer(grid, block, minutes) -> None:
    store = WindowStore(window_s=20 * 60, interval_s=60, metrics=(M,))  # 20 slots: 40 rows wrap
    store.register(["a", "b", "c"])
    for i, row in enumerate(grid):
        store.ingest_arrays(T0 + timedelta(minutes=i), {M: [np.nan if v is None else v for v in row]})
    view = store.view(T0 + timedelta(minutes=len(grid) - 1))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trends, "_BLOCK_CELLS", block * 3)  # `block` rows of the 3 GPUs
        got = trends.counter_increase(view, M, minutes * 60.0)
    np.testing.assert_array_equal(got, _reference(view, minutes * 60.0))
