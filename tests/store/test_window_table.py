"""The window's ingest of a SampleTable (columns) leaves exactly what the ingest of its rows
(Sample objects) leaves: late samples, holder changes, sentinels and missing values included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusteward.domain.models import Metric, Sample
from gpusteward.domain.sample_table import SampleTable
from gpusteward.store.window import WindowStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GPUS = ["GPU-a", "GPU-b", "GPU-c"]
_value = st.one_of(st.none(), st.floats(min_value=-2.0, max_value=100.0, allow_nan=False, width=32))
_row = st.tuples(st.sampled_from(GPUS), st.integers(-3, 0), _value, _value)  # uuid, slots back, util, mem
Tick = tuple[list[tuple[str, int, float | None, float | None]], dict[str, str], int]
_tick = st.tuples(
    st.lists(_row, max_size=8),
    st.dictionaries(st.sampled_from(GPUS), st.sampled_from(["", "job-1", "job-2"])),
    st.integers(1, 3),  # slots the clock moves on
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_tick, min_size=1, max_size=10))
def test_a_table_is_ingested_as_its_rows(
    ticks: list[tuple[list[tuple[str, int, float | None, float | None]], dict[str, str], int]],
) -> None:
    by_rows = WindowStore(60, 10, metrics=(Metric.GPU_UTIL, Metric.MEM_USED, Metric.POWER))
    by_table = WindowStore(60, 10, metrics=(Metric.GPU_UTIL, Metric.MEM_USED, Metric.POWER))
    slot = 0
    for rows, holders, step in ticks:
        slot += step
        now = T0 + timedelta(seconds=10 * slot)
        samples = [
            Sample(u, now + timedelta(seconds=10 * back - 3), gpu_util_pct=util, mem_used_mib=mem)
            for u, back, util, mem in rows
        ]
        table = SampleTable.of(samples)
        by_rows.ingest(now, samples, holders or None)
        by_table.ingest(now, SampleTable(table.uuids, table.at_s, table.columns), holders or None)
        assert by_table.uuids == by_rows.uuids
        assert by_table.head_slot == by_rows.head_slot
        assert np.array_equal(by_table.row_slots, by_rows.row_slots)
        for m in by_rows.metrics:
            assert by_table.holds_data(m) == by_rows.holds_data(m)
            assert np.array_equal(by_table._rings[m], by_rows._rings[m], equal_nan=True)
        view_t, view_r = by_table.view(now), by_rows.view(now)
        for m in (Metric.GPU_UTIL, Metric.MEM_USED):
            assert np.array_equal(view_t.mean(m, 60), view_r.mean(m, 60), equal_nan=True)
            assert np.array_equal(view_t.last(m), view_r.last(m), equal_nan=True)
