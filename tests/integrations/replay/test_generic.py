"""The generic long-table trace format: parsing, units, gaps, errors with their lines."""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpusteward.domain.errors import ConfigError
from gpusteward.integrations.replay import load_trace, sniff
from gpusteward.integrations.replay.generic import (
    load_generic,
    parse_long_table,
    parse_time,
    read_csv_columns,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "replay"
SMALL = FIXTURES / "generic_small.csv"
T10 = datetime(2025, 3, 4, 10, 0, tzinfo=UTC).timestamp()


def columns(**extra: list[Any]) -> dict[str, list[Any]]:
    base: dict[str, list[Any]] = {
        "timestamp": [T10, T10 + 60],
        "gpu": ["g0", "g0"],
        "util_pct": [50, 60],
        "mem_used_mib": [100, 100],
    }
    base.update(extra)
    return base


def test_small_fixture_parses_with_units_and_owners() -> None:
    tr = load_trace(SMALL)
    assert sniff(SMALL) == "generic"
    assert [g.uuid for g in tr.gpus] == ["GPU-a", "GPU-b", "GPU-c"]
    assert [(g.node, g.index) for g in tr.gpus] == [("n1", 0), ("n1", 1), ("n1", 2)]
    assert {g.model for g in tr.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert tr.gpus[0].memory_total_mib == 81559
    assert list(tr.t) == sorted(tr.t)  # rows come out in time order
    assert tr.interval_s == 60
    by_id = {w.id: w for w in tr.workloads}
    assert set(by_id) == {"job-1", "job-2"}
    job1, job2 = by_id["job-1"], by_id["job-2"]
    assert (job1.owner.user, job1.owner.team) == ("alice", "vision")
    assert job1.started_at == T10 - 1800  # its own column, not its first sample
    assert job2.started_at == job2.first_t == T10  # no column value: its first sample
    assert job2.last_t == T10 + 600
    assert job1.gpus == (0,)
    assert job2.gpus == (1,)
    # GPU-c has samples but nobody holds it.
    c_rows = tr.gpu == 2
    assert c_rows.sum() == 2
    assert (tr.wl[c_rows] == -1).all()
    # Bytes become MiB; a DCGM SM ratio becomes percent; an empty cell is NaN, never 0.
    first_a = np.flatnonzero(tr.gpu == 0)[0]
    assert tr.mem is not None
    assert tr.mem[first_a] == 40960
    assert tr.sm is not None
    assert tr.sm[first_a] == pytest.approx(91)
    b_missing = np.flatnonzero((tr.gpu == 1) & (tr.t == T10 + 60))[0]
    assert math.isnan(tr.util[b_missing])
    assert math.isnan(tr.sm[b_missing])
    assert tr.power is not None
    assert tr.power[first_a] == pytest.approx(310.5)


def test_a_sample_speaks_for_the_time_to_the_next_unless_that_is_a_gap() -> None:
    tr = load_trace(SMALL)
    span = {(int(g), float(t)): float(s) for g, t, s in zip(tr.gpu, tr.t, tr.span_s, strict=True)}
    assert span[(0, T10 + 60)] == 90  # irregular interval: 10:01 -> 10:02:30
    assert span[(0, T10 + 150)] == 30
    assert span[(1, T10 + 120)] == 60  # 10:02 -> 10:10 is a gap: one interval, the rest missing
    assert span[(1, T10 + 600)] == 60  # last sample: one interval


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1741082400, 1741082400.0),
        (1741082400.5, 1741082400.5),
        ("1741082400", 1741082400.0),
        ("2025-03-04T10:00:00Z", 1741082400.0),
        ("2025-03-04T11:00:00+01:00", 1741082400.0),
        ("2025-03-04 10:00:00", 1741082400.0),  # no offset: UTC
        (datetime(2025, 3, 4, 10, 0), 1741082400.0),
        (datetime(2025, 3, 4, 12, 0, tzinfo=timezone(timedelta(hours=2))), 1741082400.0),
        ("", None),
        ("  ", None),
        (None, None),
        (float("nan"), None),
    ],
)
def test_parse_time(value: Any, expected: float | None) -> None:
    assert parse_time(value) == expected


def test_parse_time_rejects_junk() -> None:
    with pytest.raises(ValueError, match="Invalid isoformat"):
        parse_time("yesterday")


@pytest.mark.parametrize(
    ("cols", "problem", "line"),
    [
        (
            {"timestamp": [T10], "gpu": ["g"], "util_pct": [1]},
            "missing column.*mem_used_mib or mem_used_bytes",
            1,
        ),
        ({"timestamp": [T10], "gpu": ["g"], "mem_used_mib": [1]}, "missing column.*util_pct", 1),
        (columns(utl_pct=[1, 2]), "unknown column 'utl_pct': did you mean 'util_pct'", 1),
        (columns(timestamp=[T10, "tomorrow"]), "timestamp: not epoch seconds or RFC 3339: 'tomorrow'", 3),
        (columns(timestamp=[T10, ""]), "timestamp: empty", 3),
        (columns(util_pct=["5", "lots"]), "util_pct: not a number: 'lots'", 3),
        (columns(gpu=["g0", ""]), "gpu: empty", 3),
        (columns(workload_started_at=["x", ""], workload=["w", "w"]), "workload_started_at: not epoch", 2),
    ],
)
def test_bad_tables_name_the_line(cols: dict[str, list[Any]], problem: str, line: int) -> None:
    with pytest.raises(ConfigError, match=problem) as e:
        parse_long_table(cols, path="t.csv")
    assert (e.value.path, e.value.line) == ("t.csv", line)


def test_bad_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ConfigError, match="empty file"):
        read_csv_columns(empty)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("timestamp,gpu,util_pct,mem_used_mib\n1,g,5,1\n2,g,5\n")
    with pytest.raises(ConfigError, match="3 fields, the header has 4") as e:
        load_generic(ragged)
    assert e.value.line == 3
    no_rows = tmp_path / "header.csv"
    no_rows.write_text("timestamp,gpu,util_pct,mem_used_mib\n")
    with pytest.raises(ConfigError, match="no rows"):
        load_generic(no_rows)
    with pytest.raises(ConfigError, match="cannot read trace"):
        load_trace(tmp_path / "missing.csv")
    odd = tmp_path / "odd.csv"
    odd.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(ConfigError, match="unknown trace format"):
        load_trace(odd)


def test_without_a_workload_column_each_gpu_is_one_workload() -> None:
    tr = parse_long_table(
        {
            "timestamp": [T10, T10, T10 + 60],
            "gpu": ["a", "b", "a"],
            "util_pct": [1, 2, 3],
            "mem_used_mib": [0, 0, 0],
        }
    )
    assert [(w.id, w.gpus, w.owner.user) for w in tr.workloads] == [
        ("a", (0,), "unknown"),
        ("b", (1,), "unknown"),
    ]
    assert (tr.wl == tr.gpu).all()
    assert tr.workloads[0].last_t == T10 + 60


def test_duplicate_samples_keep_the_last_row() -> None:
    tr = parse_long_table(columns(timestamp=[T10, T10], util_pct=[10, 70], workload=["w1", "w2"]))
    assert len(tr) == 1
    assert tr.util[0] == 70
    assert [w.id for w in tr.workloads] == ["w2"]  # w1 only ever had the dropped row
    assert tr.wl[0] == 0


def test_sm_active_in_percent_is_kept_and_gpus_requested_is_read() -> None:
    tr = parse_long_table(columns(sm_active=[45, 50], workload=["w", "w"], gpus_requested=["8", "8"]))
    assert tr.sm is not None
    assert list(tr.sm) == [45, 50]
    assert tr.workloads[0].requested == 8
    assert parse_long_table(columns(workload=["w", "w"])).workloads[0].requested == 1


def test_unknown_columns_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        tr = parse_long_table(columns(temperature=[40, 41]), path="t.csv")
    assert len(tr) == 2
    assert "'temperature' is not part of the trace format" in caplog.text


def test_parquet_gives_the_same_trace_as_csv(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    cols = read_csv_columns(SMALL)
    table = pa.table({k: [v or None for v in vs] for k, vs in cols.items()})
    pq.write_table(table, tmp_path / "small.parquet")
    a, b = load_trace(SMALL), load_trace(tmp_path / "small.parquet")
    assert sniff(tmp_path / "small.parquet") == "generic"
    assert [g.uuid for g in a.gpus] == [g.uuid for g in b.gpus]
    assert a.workloads == b.workloads
    np.testing.assert_array_equal(a.t, b.t)
    np.testing.assert_array_equal(a.util, b.util)
    np.testing.assert_array_equal(a.wl, b.wl)
