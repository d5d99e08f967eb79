"""The engine benchmark runs end to end at a tiny size (no timing is asserted)."""

from __future__ import annotations

import json

import pytest


def test_bench_runs_and_both_methods_agree(load_bench, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench("engine")
    out = bench.main(["--gpus", "200", "--repeats", "1", "--baseline-gpus", "200", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == out
    assert {"gpus", "tick_ms", "baseline_ms", "ratio", "window_bytes_per_gpu"} <= set(printed)
    assert printed["gpus"] == 200
    assert printed["window_bytes_per_gpu"] == 720
    assert printed["ring_bytes_per_gpu_metric"] == 720  # 180 float32 slots: 30 min at 10 s
    # The rings and what is kept between ticks (blocks of 16 slots: far less than the rings).
    assert 0 < printed["kept_bytes_per_gpu_metric"] < 720
    assert printed["bytes_per_gpu_metric"] == 720 + printed["kept_bytes_per_gpu_metric"]
    assert printed["baseline_scaled"] is False
    assert printed["findings"] > 0  # the agreement below is about something
    assert printed["agree"] is True


def test_bench_scales_the_baseline_when_asked(load_bench, capsys: pytest.CaptureFixture[str]) -> None:
    out = load_bench("engine").main(["--gpus", "300", "--repeats", "1", "--baseline-gpus", "50"])
    assert "scaled linearly" in capsys.readouterr().out
    assert out["baseline_scaled"] is True
    assert out["agree"] is True
