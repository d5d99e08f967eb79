"""The backtest benchmark runs end to end at a tiny size (no timing is asserted)."""

from __future__ import annotations

import json

import numpy as np
import pytest


def test_bench_runs_and_reports_both_passes(load_bench, capsys: pytest.CaptureFixture[str]) -> None:
    out = load_bench("backtest").main(["--gpus", "16", "--days", "0.25", "--interval", "300", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == out
    (size,) = printed["sizes"]
    assert size["gpus"] == 16
    assert size["sim_gpu_hours"] == 16 * 6
    assert size["samples"] > 0
    for key in (
        "replay_gpu_hours_per_s",
        "backtest_gpu_hours_per_s",
        "ratio",
        "stops",
        "regrets",
        "replay_rows_s",
    ):
        assert key in size
    # The throughput share is the inverse of the cost ratio (both rounded).
    assert size["backtest_over_replay"] == pytest.approx(1 / size["ratio"], rel=0.05)


def test_synthetic_trace_is_well_formed(load_bench) -> None:
    trace = load_bench("backtest").synthetic_trace(24, 1.0, 300, seed=3)
    assert len(trace.gpus) == 24
    assert len(trace) == 24 * 288
    assert trace.interval_s == 300
    assert (np.diff(trace.t) >= 0).all()
    held = trace.wl >= 0
    assert held.any()
    assert (~held).any()  # gaps between jobs
    for i, w in enumerate(trace.workloads):
        rows = trace.rows_of(i)
        assert set(trace.gpu[rows].tolist()) == set(w.gpus)
        assert (trace.t[rows].min(), trace.t[rows].max()) == (w.first_t, w.last_t)
