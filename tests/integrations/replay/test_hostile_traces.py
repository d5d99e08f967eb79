"""Hostile and careless traces: times that would hang a backtest (``1e23 + 60 == 1e23``) or crash
it, counts that would allocate without bound, and arbitrary CSV text. Each is a ``ConfigError``
naming the file and, where one row is to blame, its line; never a traceback or a hang."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusteward.domain.errors import ConfigError, StewardError
from gpusteward.integrations.replay import load_trace
from gpusteward.integrations.replay.generic import parse_long_table
from gpusteward.integrations.replay.helios import parse_helios
from gpusteward.integrations.replay.trace import MAX_SPAN_S

HEADER = "timestamp,gpu,util_pct,mem_used_mib\n"
GOOD = "2025-03-04T10:00:00Z,g0,50,100\n"


def _csv(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "".join(rows))
    return path


@pytest.mark.parametrize(
    "stamp",
    ["1e400", "1e23", "-1e23", "nan", "inf", "-inf", "-62135596800", "9999-12-31T00:00:00", "7258118401"],
)
def test_a_time_outside_1970_to_2200_is_refused_with_its_line(tmp_path: Path, stamp: str) -> None:
    path = _csv(tmp_path, GOOD, f"{stamp},g0,5,100\n")
    with pytest.raises(ConfigError, match=r"timestamp: .*between 1970 and 2200") as e:
        load_trace(path)
    assert (e.value.path, e.value.line) == (str(path), 3)


def test_a_bad_start_time_is_refused_too() -> None:
    cols: dict[str, list[Any]] = {
        "timestamp": [1.7e9, 1.7e9 + 60],
        "gpu": ["g", "g"],
        "util_pct": [1, 1],
        "mem_used_mib": [1, 1],
        "workload": ["w", "w"],
        "workload_started_at": ["", "1e23"],
    }
    with pytest.raises(ConfigError, match=r"workload_started_at: .*between 1970") as e:
        parse_long_table(cols, path="t.csv")
    assert e.value.line == 3


def test_a_trace_longer_than_a_replay_can_tick_through_is_refused(tmp_path: Path) -> None:
    # Two samples 1970 and 2200: every time is valid, but a backtest would tick for 230 years.
    path = _csv(tmp_path, "0,g0,50,100\n", "7258118400,g0,50,100\n")
    with pytest.raises(ConfigError, match=r"spans .* days; at most") as e:
        load_trace(path)
    assert e.value.line == 3
    ok = _csv(tmp_path, "0,g0,50,100\n", f"{MAX_SPAN_S:.0f},g0,50,100\n")
    assert load_trace(ok).end > MAX_SPAN_S  # the bound itself is allowed


@pytest.mark.parametrize("requested", ["1e400", "-1", "1e300"])
def test_gpus_requested_out_of_range_is_refused(requested: str) -> None:
    cols: dict[str, list[Any]] = {
        "timestamp": [1.7e9],
        "gpu": ["g"],
        "util_pct": [1],
        "mem_used_mib": [1],
        "gpus_requested": [requested],
    }
    with pytest.raises(ConfigError, match="gpus_requested") as e:
        parse_long_table(cols, path="t.csv")
    assert e.value.line == 2


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ("9999-01-01 00:00:00,64,28", "time: .*between 1970"),
        ("0001-01-01 00:00:00,64,28", "time: .*between 1970"),
        ("2020-05-26 19:02:00,99999999999999999999,28", "total_gpu_num"),
        ("2020-05-26 19:02:00,1e400,28", "bad row"),
        ("2020-05-26 19:02:00,nan,28", "bad row"),
    ],
)
def test_helios_rows_out_of_range_are_refused_with_their_line(row: str, problem: str) -> None:
    rows = [["time", "total_gpu_num", "running_gpu_num"], ["2020-05-26 19:01:00", "64", "28"], row.split(",")]
    with pytest.raises(ConfigError, match=problem) as e:
        parse_helios(rows, path="h.csv")
    assert e.value.line == 3


CELLS = st.one_of(
    st.sampled_from(["", "0", "1", "-1", "50", "1e400", "1e23", "nan", "inf", "2025-03-04T10:00:00Z", "x"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.text(max_size=8),
)
COLUMNS = st.lists(
    st.sampled_from(
        ["timestamp", "gpu", "util_pct", "mem_used_mib", "mem_used_bytes", "mem_total_mib", "sm_active",
         "power_w", "workload", "owner", "workload_started_at", "gpus_requested", "nodes"]
    ),
    min_size=1,
    max_size=6,
    unique=True,
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    COLUMNS.flatmap(
        lambda names: st.tuples(
            st.just(names), st.lists(st.lists(CELLS, min_size=len(names), max_size=len(names)), max_size=6)
        )
    )
)
def test_any_long_table_loads_or_is_a_config_error(table: tuple[list[str], list[list[str]]]) -> None:
    names, rows = table
    columns = {name: [row[i] for row in rows] for i, name in enumerate(names)}
    with contextlib.suppress(ConfigError):
        trace = parse_long_table(columns, path="fuzz.csv")
        assert trace.end - trace.start <= MAX_SPAN_S + trace.interval_s


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([HEADER, "time,total_gpu_num,running_gpu_num\n", ""]),
    st.text(alphabet=st.sampled_from(list(',\n"\r0123456789.e-:TZ timestampgpuil_')), max_size=200),
)
def test_any_csv_file_loads_or_is_a_steward_error(
    tmp_path_factory: pytest.TempPathFactory, header: str, body: str
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "t.csv"
    path.write_text(header + body)
    with contextlib.suppress(StewardError):
        load_trace(path)


@pytest.mark.parametrize(
    ("cell", "column", "problem"),
    [
        ("-5", "util_pct", "-5 is not 0 to 100"),
        ("150", "util_pct", "150 is not 0 to 100"),
        ("inf", "util_pct", "inf is not 0 to 100"),
        ("-1", "mem_used_mib", "-1 is not at least 0"),
    ],
)
def test_impossible_readings_are_refused_with_their_line(cell: str, column: str, problem: str) -> None:
    # Counted as they are, a negative utilisation would be waste in the backtest.
    rows = {"timestamp": ["1741046400", "1741046460"], "gpu": ["g", "g"], "util_pct": ["0", "0"]}
    rows["mem_used_mib"] = ["10", "10"]
    rows[column] = [rows[column][0], cell]
    with pytest.raises(ConfigError) as e:
        parse_long_table(rows, path="t.csv")
    assert problem in e.value.problem
    assert (e.value.path, e.value.line) == ("t.csv", 3)


def test_a_class_column_is_part_of_the_format(caplog: pytest.LogCaptureFixture) -> None:
    rows = {
        "timestamp": ["1741046400"],
        "gpu": ["g"],
        "util_pct": ["0"],
        "mem_used_mib": ["10"],
        "workload": ["w"],
        "class": ["Batch "],
    }
    trace = parse_long_table(rows, path="t.csv")
    assert [w.workload_class for w in trace.workloads] == ["batch"]
    assert "not part of the trace format" not in caplog.text
