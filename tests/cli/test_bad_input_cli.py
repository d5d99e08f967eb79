"""Bad input on the command line ends in one red line and exit 2 (config) or 1 (state), never a
traceback, a hang or a silent success."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpusteward.cli import app
from gpusteward.store.db import StateStore

runner = CliRunner()


def invoke(*args: str | Path) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        result.exception
    )
    return result.exit_code, result.output


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUSTEWARD_STORE__URL", f"sqlite:///{tmp_path / 'state.db'}")
    monkeypatch.setenv("COLUMNS", "300")
    return tmp_path


@pytest.fixture
def hanging_trace(tmp_path: Path) -> Path:
    """Before the fix the backtest looped forever on this (``1e23 + 60 == 1e23``)."""
    path = tmp_path / "bad.csv"
    path.write_text("timestamp,gpu,util_pct,mem_used_mib\n1741046400,g0,0,100\n1e23,g0,0,100\n")
    return path


def test_backtest_on_a_trace_with_a_time_out_of_range_exits_2_naming_the_line(
    env: Path, hanging_trace: Path
) -> None:
    code, out = invoke("backtest", "--trace", hanging_trace)
    assert code == 2
    assert f"{hanging_trace}:3: timestamp:" in out
    assert "Traceback" not in out


def test_scan_on_such_a_trace_exits_2_too(env: Path, hanging_trace: Path) -> None:
    cfg = env / "c.yaml"
    cfg.write_text(f"source:\n  name: replay\n  replay:\n    trace: {hanging_trace}\n")
    code, out = invoke("scan", "-c", cfg)
    assert code == 2
    assert f"{hanging_trace}:3:" in out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--from", "1e23", "--to", "2025-01-02T00:00:00Z"), "--from: 1e+23 is not a time between 1970"),
        (("--from", "2025-01-01T00:00:00Z", "--to", "nan"), "--to: nan is not a time"),
    ],
)
def test_backtest_history_bounds_out_of_range_exit_2(env: Path, args: tuple[str, ...], words: str) -> None:
    code, out = invoke("backtest", "--source", "sim", *args)
    assert code == 2
    assert words in out


@pytest.mark.parametrize("tick", ["0.0001", "1e9"])
def test_backtest_tick_out_of_range_exits_2(env: Path, hanging_trace: Path, tick: str) -> None:
    code, out = invoke("backtest", "--trace", hanging_trace, "--tick-seconds", tick)
    assert code == 2
    assert "--tick-seconds" in out


def test_scan_on_a_new_machine_creates_the_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUSTEWARD_STORE__URL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "fresh" / "state"))  # does not exist yet
    code, out = invoke("scan", "--json")
    assert code == 0, out
    assert (tmp_path / "fresh" / "state" / "gpusteward" / "gpusteward.db").is_file()


def test_run_on_a_read_only_database_stops_with_one_line(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = env / "state.db"
    StateStore(f"sqlite:///{db}").create_schema()
    monkeypatch.setenv("GPUSTEWARD_STORE__URL", f"sqlite:///file:{db}?mode=ro&uri=true")
    code, out = invoke("run", "--max-ticks", "2")
    assert code == 1
    lines = out.splitlines()
    assert lines[-1].startswith("error: the state database")
    assert "readonly" in lines[-1]
    assert "Traceback" not in out


@pytest.mark.parametrize(
    "args",
    [
        ("audit", "--limit", "-5"),
        ("audit", "list", "--limit", "0"),
        ("audit", "--limit", str(2**70)),
        ("approvals", "list", "--limit", str(2**70)),
        ("approvals", "approve", str(2**70)),
        ("approvals", "reject", "0"),
    ],
)
def test_integers_out_of_range_exit_2(env: Path, args: tuple[str, ...]) -> None:
    code, out = invoke(*args)
    assert code == 2
    assert "Invalid value" in out


def test_audit_verify_expect_must_be_a_hash_not_blame_deletion(env: Path) -> None:
    code, out = invoke("audit", "verify", "--expect", "zzz")
    assert code == 2
    assert "--expect: not a record hash (64 hex digits" in out
    assert "deleted" not in out
