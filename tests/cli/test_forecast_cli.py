"""`gpusteward forecast` and `gpusteward advise` through Typer's runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpusteward.cli import app

pytest.importorskip("statsmodels")

runner = CliRunner()
FIXTURE = (
    Path(__file__).resolve().parents[1]
    / "fixtures/replay/earth_vc3sl_cluster_sequence_vc_2020-05_240_minutes.csv"
)
HELIOS = (
    Path(__file__).resolve().parents[1]
    / "fixtures/traces/earth_vc3sl_cluster_sequence_vc_2020-05_per_minute.csv.gz"
)


@pytest.fixture(autouse=True)
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUSTEWARD_STORE__URL", f"sqlite:///{tmp_path / 'state.db'}")
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_forecast_a_short_helios_slice_as_json() -> None:
    code, output = invoke("forecast", "--trace", str(FIXTURE), "--horizon-hours", "2", "--json")
    assert code == 0, output
    out = json.loads(output)
    assert out["series"].endswith(":running_gpu_num")
    assert out["seasonality"] == "none"  # four hours hold no daily cycle
    fc = out["forecast"]
    assert len(fc["mean"]) == 8
    assert fc["step_seconds"] == 900
    assert all(lo <= m <= hi for lo, m, hi in zip(fc["lower"], fc["mean"], fc["upper"], strict=True))
    assert all(0 <= v <= 64 * 1.5 for v in fc["upper"])  # 64 GPUs in this virtual cluster


def test_forecast_from_a_point_in_the_month_with_windows_and_chart(env: Path) -> None:
    svg = env / "fc.svg"
    until = "2020-05-16T00:00:00"
    code, output = invoke(
        "forecast", "--trace", str(HELIOS), "--until", until, "--svg", str(svg), "--max", "64"
    )
    assert code == 0, output
    assert "seasonality" in output
    assert "Sat" in output
    assert svg.read_text().startswith("<svg")
    assert 'data-chart="bar"' in svg.read_text()
    code, output = invoke("forecast", "--trace", str(HELIOS), "--until", until, "--max", "64", "--json")
    assert max(json.loads(output)["forecast"]["upper"]) <= 64


def test_bad_csv_exits_2_with_the_file_and_line(env: Path) -> None:
    bad = env / "bad.csv"
    bad.write_text("time,demand\n2020-05-01 00:00:00,3\nnot a time,4\n")
    code, output = invoke("forecast", "--trace", str(bad))
    assert code == 2
    assert f"{bad}:3" in output
    assert "bad row" in output
    code, output = invoke("forecast", "--trace", str(bad), "--column", "gpus")
    assert code == 2
    assert "no column 'gpus'" in output


def test_advise_json_on_the_simulated_cluster() -> None:
    code, output = invoke("advise", "--source", "sim", "--json")
    assert code == 0, output
    out = json.loads(output)
    assert {"at", "advice", "notes"} <= set(out)
    for row in out["advice"]:
        assert {"workload", "rule", "kind", "gpus", "advice"} <= set(row)
        assert row["advice"]
