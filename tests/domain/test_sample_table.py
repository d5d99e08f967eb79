"""SampleTable: rows read back exactly as the samples they stand for, and its column helpers
answer as the row-by-row code they replace."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusteward.domain.models import Sample
from gpusteward.domain.sample_table import FIELDS, SampleTable, latest

T0 = datetime(2026, 12, 1, tzinfo=UTC)

_value = st.one_of(st.none(), st.floats(min_value=-5.0, max_value=200.0, allow_nan=False, width=32))
_sample = st.builds(
    Sample,
    gpu_uuid=st.sampled_from(["GPU-a", "GPU-b", "GPU-c"]),
    at=st.integers(0, 5).map(lambda k: T0 + timedelta(seconds=10 * k)),
    gpu_util_pct=_value,
    power_w=_value,
    mem_used_mib=_value,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_sample, max_size=12))
def test_rows_of_a_table_built_from_samples_are_those_samples(samples: list[Sample]) -> None:
    table = SampleTable.of(samples)
    # Rebuilt from its columns alone, not from the kept rows.
    fresh = SampleTable(table.uuids, table.at_s, table.columns)
    assert list(fresh) == samples
    assert len(fresh) == len(samples)
    assert set(table.columns) == {f for f in FIELDS if any(getattr(s, f) is not None for s in samples)}


@settings(max_examples=200, deadline=None)
@given(st.lists(_sample, max_size=12), st.sampled_from(["gpu_util_pct", "power_w", "temp_c"]))
def test_latest_is_the_last_measured_value_per_gpu(samples: list[Sample], name: str) -> None:
    expected = {s.gpu_uuid: getattr(s, name) for s in samples if getattr(s, name) is not None}
    table = SampleTable.of(samples)
    got = SampleTable(table.uuids, table.at_s, table.columns).latest(name)
    assert got == expected
    assert list(got) == list(expected)  # in the same order
    assert latest(samples, name) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(_sample, max_size=12), st.integers(-1, 6))
def test_newer_than_compares_as_the_rows_times_do(samples: list[Sample], k: int) -> None:
    prev = T0 + timedelta(seconds=10 * k)
    table = SampleTable.of(samples)
    assert table.newer_than(prev).tolist() == [s.at > prev for s in samples]


def test_nan_reads_as_not_measured_and_a_missing_column_as_none() -> None:
    t = T0.timestamp()
    table = SampleTable(
        ["GPU-a", "GPU-b"], [t, t + 10], {"gpu_util_pct": np.array([np.nan, 42.5], np.float32)}
    )
    a, b = table
    assert a == Sample("GPU-a", T0, gpu_util_pct=None)
    assert b == Sample("GPU-b", T0 + timedelta(seconds=10), gpu_util_pct=42.5)
    assert table[1].power_w is None
    assert table.column("power_w") is None


def test_columns_are_read_only() -> None:
    util = np.array([1.0, 2.0])
    table = SampleTable(["a", "b"], [0.0, 0.0], {"gpu_util_pct": util})
    with pytest.raises(ValueError, match="read-only"):
        table.columns["gpu_util_pct"][0] = 5.0
    util[0] = 7.0  # the caller's own array stays writable
    assert math.isclose(util[0], 7.0)


@pytest.mark.parametrize(
    ("columns", "at", "message"),
    [
        ({"gpu_util": [1.0, 2.0]}, [0.0, 0.0], "'gpu_util' is not a Sample field"),
        ({"gpu_util_pct": [1.0]}, [0.0, 0.0], r"column gpu_util_pct has shape \(1,\), expected \(2,\)"),
        ({}, [0.0], r"at_s has shape \(1,\), expected \(2,\)"),
    ],
)
def test_misshapen_tables_are_refused(columns: dict[str, list[float]], at: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SampleTable(["a", "b"], at, columns)
