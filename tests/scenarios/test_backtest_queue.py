"""The backtest with a queue: real pods (Alibaba's GPU pod list) wait for the replayed trace's GPUs,
demand paces the ladder, and the result compares queue times with gpusteward and without."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpusteward.cli import app
from gpusteward.integrations.replay import load_trace
from gpusteward.integrations.replay.pods import load_pod_list
from gpusteward.runtime.config import load_settings
from gpusteward.scenarios.backtest import run_backtest
from gpusteward.scenarios.backtest_queue import queue_line
from gpusteward.scenarios.scoring import Scoring

ROOT = Path(__file__).resolve().parents[2]
PODS = ROOT / "tests" / "fixtures" / "traces" / "openb_pod_list_days118-120.csv"
GENTD26 = ROOT / "tests" / "fixtures" / "traces" / "gentd26_pods_dev_half.csv.gz"
SCENARIO = ROOT / "tests" / "fixtures" / "replay" / "scenario_6h.csv"
QUEUE_KEYS = {"queue_time_p50_min", "queue_time_p95_min", "queue_jobs"}


@pytest.fixture(scope="module")
def gentd26_json(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``backtest --json`` of the GenTD26 pods with three days of pods arriving in one."""
    trace = tmp_path_factory.mktemp("gentd26") / "trace.csv"
    with gzip.open(GENTD26, "rb") as src, trace.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    res = CliRunner().invoke(
        app,
        ["backtest", "--trace", str(trace), "--queue", str(PODS), "--queue-scale", "0.3333", "--json"],
    )
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def test_queue_figures_on_the_serving_trace(gentd26_json: dict[str, Any]) -> None:
    s = gentd26_json
    assert set(s) >= QUEUE_KEYS
    pods = load_pod_list(PODS, scale=0.3333)
    jobs = s["queue_jobs"]
    assert jobs["arrived"] + jobs["after_replay_end"] == len(pods.jobs)
    assert jobs["skipped_rows"] == pods.skipped
    for side in ("with_gpusteward", "without"):
        assert jobs["started"][side] + jobs["unstarted"][side] == jobs["arrived"]
        assert s["queue_time_p50_min"][side] <= s["queue_time_p95_min"][side]
    # The stops free GPUs the serving pods would have held all day: jobs wait less and more start.
    assert s["stops"] > 0
    assert s["queue_time_p50_min"]["with_gpusteward"] < s["queue_time_p50_min"]["without"]
    assert s["queue_time_p95_min"]["with_gpusteward"] < s["queue_time_p95_min"]["without"]
    assert jobs["started"]["with_gpusteward"] >= jobs["started"]["without"]
    line = queue_line(s)
    assert line is not None
    assert f"{jobs['arrived']} jobs" in line


def test_demand_moves_the_ladder_faster() -> None:
    """The same scripted scenario with and without jobs waiting: with them, each idle workload is
    stopped earlier (demand shortens the waits between ladder steps)."""
    trace = load_trace(SCENARIO)
    settings = load_settings(None, policy={"budget": {"max_gpu_share_per_hour": 1.0}})
    scoring = Scoring(busy_pct=2.0)
    alone = run_backtest(trace, settings, scoring=scoring)
    waited = run_backtest(trace, settings, scoring=scoring, queue=load_pod_list(PODS, scale=1 / 12))
    assert not QUEUE_KEYS & set(alone.summary)  # no queue: the summary is as it was
    stops = {j.stop.workload_id: j.stop.at_t for j in alone.stops}
    sooner = {j.stop.workload_id: j.stop.at_t for j in waited.stops}
    assert stops
    assert set(sooner) == set(stops)
    assert all(sooner[w] < stops[w] for w in stops)


def test_text_output_and_options(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app, ["backtest", "--trace", str(SCENARIO), "--queue", str(PODS), "--queue-scale", "0.1"]
    )
    assert res.exit_code == 0, res.output
    assert "configured: queue time p50/p95 (min):" in res.stdout
    assert "374 jobs of 784 rows" in res.output  # the rows left out are said on stderr
    res = CliRunner().invoke(app, ["backtest", "--trace", str(SCENARIO), "--queue-scale", "0.1"])
    assert res.exit_code != 0
    assert "--queue-scale goes with --queue" in res.output
    res = CliRunner().invoke(
        app, ["backtest", "--trace", str(SCENARIO), "--queue", str(PODS), "--queue-scale", "-1"]
    )
    assert res.exit_code != 0
    assert "positive" in res.output
