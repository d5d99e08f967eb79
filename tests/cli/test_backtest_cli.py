"""`gpusteward backtest`, `gpusteward report` and `--source replay` from the command line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpusteward.cli import app

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "replay"
POLICIES = ROOT / "examples" / "policies"
runner = CliRunner()


def invoke(*args: str | Path) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUSTEWARD_STORE__URL", f"sqlite:///{tmp_path / 'state.db'}")
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


@pytest.fixture(scope="module")
def short_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scenario's first 150 minutes: enough for every preset to act once."""
    lines = (FIXTURES / "scenario_6h.csv").read_text().splitlines()
    end = 1741046400 + 150 * 60
    keep = [lines[0], *(line for line in lines[1:] if int(line.split(",")[0]) < end)]
    path = tmp_path_factory.mktemp("trace") / "short.csv"
    path.write_text("\n".join(keep) + "\n")
    return path


def test_backtest_json_has_the_promised_keys(env: Path, short_trace: Path) -> None:
    code, out = invoke("backtest", "--trace", short_trace, "--json")
    assert code == 0, out
    s = json.loads(out)
    assert {
        "hours",
        "gpus",
        "workloads",
        "waste_gpu_hours",
        "reclaimed_gpu_hours",
        "cost_saved",
        "actions_by_level",
        "regrets",
        "detection_latency_p50_min",
    } <= set(s)
    assert (s["hours"], s["gpus"], s["workloads"], s["policy"]) == (2.5, 8, 5, "configured")
    assert not (env / "state.db").exists()  # the user's state is never touched


def test_policies_side_by_side_with_actions_csv_and_a_report(env: Path, short_trace: Path) -> None:
    actions = env / "actions.csv"
    state = env / "bt" / "state.db"
    naive, jds = POLICIES / "naive.yaml", POLICIES / "job_defense_shield.yaml"
    code, out = invoke(
        "backtest",
        "-t",
        short_trace,
        "-p",
        naive,
        "-p",
        jds,
        "--actions-csv",
        actions,
        "--state",
        state,
        "--json",
        "--busy-pct",  # the scripted zombie idles at exactly 1 %: score from 2 %
        "2",
    )
    assert code == 0, out
    results = json.loads(out[out.index("{") :])["policies"]
    assert [r["policy"] for r in results] == ["naive", "job_defense_shield"]
    naive, jds = results
    assert (naive["stops"], naive["regrets"], jds["stops"], jds["regrets"]) == (3, 1, 1, 0)
    with actions.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["time", "workload", "gpu", "level", "rule", "step", "status", "policy"]
    assert len(rows) == sum(sum(r["actions_by_level"].values()) for r in results)
    assert {(r["policy"], r["workload"]) for r in rows if r["level"] == "L2"} == {
        ("naive", "idle-1"),
        ("naive", "pause-1"),
        ("naive", "zombie-1"),
        ("job_defense_shield", "idle-1"),
    }
    assert all(r["time"].isdigit() for r in rows)
    # One state file per policy, each a ledger the report reads.
    kept = sorted(p.name for p in state.parent.iterdir() if p.suffix == ".db")
    assert kept == ["state-job_defense_shield.db", "state-naive.db"]
    code, out = invoke("report", "--db", state.parent / "state-naive.db", "--out", env / "html", "--json")
    assert code == 0, out
    files = json.loads(out)["files"]
    assert set(files) == {"cluster", "nlp", "vision"}
    html = Path(files["cluster"]).read_text()
    # Four charts of waste and savings, and the showback's cost per day by team.
    assert html.count("<svg") == 5
    assert "Cost per day by team" in html
    assert 'id="stops" data-value="3"' in html


def test_backtest_table(env: Path, short_trace: Path) -> None:
    code, out = invoke("backtest", "-t", short_trace, "-p", POLICIES / "naive.yaml")
    assert code == 0, out
    assert "regrets (false kills)" in out
    assert "lenient regrets (busy >= 10 % for 5 min)" in out
    # By default 10 samples at 1 % within 6 h make a false kill: the zombie's 1 % counts.
    assert "naive: regrets on pause-1, zombie-1" in out


def test_backtest_rejects_a_bad_horizon(env: Path, short_trace: Path) -> None:
    code, out = invoke("backtest", "-t", short_trace, "--horizon", "soon")
    assert code != 0
    assert "--horizon" in out


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("backtest",), 2, "--trace FILE"),
        (("backtest", "-t", "missing.csv"), 2, "cannot read trace"),
        (("backtest", "-t", FIXTURES / "generic_small.csv", "--format", "xls"), 2, "--format must be one of"),
        (("backtest", "--source", "sim"), 2, "--from and --to are needed"),
        (
            ("backtest", "-t", FIXTURES / "generic_small.csv", "--from", "0"),
            2,
            "a replay plays its whole trace",
        ),
        (("backtest", "--source", "sim", "--from", "soon", "--to", "1"), 2, "--from: not epoch seconds"),
        (("report", "--out", "x", "--period", "year"), 2, "--period must be one of"),
        (("report", "--out", "x", "--end", "monday"), 2, "--end: not a date"),
    ],
)
def test_errors_exit_with_a_reason(env: Path, args: tuple[str, ...], code: int, message: str) -> None:
    exit_code, out = invoke(*args)
    assert exit_code == code
    assert message in out.replace("\n", " ")


def test_bad_trace_rows_name_the_line(env: Path) -> None:
    bad = env / "bad.csv"
    bad.write_text("timestamp,gpu,util_pct,mem_used_mib\n2025-03-04T00:00:00Z,g0,5,1\nlater,g0,5,1\n")
    code, out = invoke("backtest", "-t", bad)
    assert code == 2
    assert f"{bad}:3: timestamp: not epoch seconds or RFC 3339" in out.replace("\n", "")


def test_scan_on_the_replay_source(env: Path) -> None:
    config = env / "replay.yaml"
    trace = FIXTURES / "scenario_6h.csv"
    # Ticks as often as the trace samples: a 30 s window of 60 s samples covers only half of it.
    config.write_text(f"tick_seconds: 60\nsource:\n  name: replay\n  replay:\n    trace: {trace}\n")
    code, out = invoke("scan", "--config", config, "--json")
    assert code == 0, out
    report = json.loads(out)
    # The trace is shifted so that its first hour fills the window: the zombie is already seen.
    assert report["gpus"] == 8
    assert {f["workload"] for f in report["findings"]} >= {"zombie-1", "idle-1"}
    config.write_text("source:\n  name: replay\n")
    code, out = invoke("scan", "--config", config)
    assert code == 2
    assert "source.replay.trace" in out
