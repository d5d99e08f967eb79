"""The engine benchmark runs end to end at a tiny size (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "engine.py"


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_engine", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_bench_runs_and_both_methods_agree(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench()
    out = bench.main(["--gpus", "200", "--repeats", "1", "--baseline-gpus", "200", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == out
    assert {"gpus", "tick_ms", "baseline_ms", "ratio", "window_bytes_per_gpu"} <= set(printed)
    assert printed["gpus"] == 200
    assert printed["window_bytes_per_gpu"] == 720
    assert printed["baseline_scaled"] is False
    assert printed["findings"] > 0  # the agreement below is about something
    assert printed["agree"] is True


def test_bench_scales_the_baseline_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    out = load_bench().main(["--gpus", "300", "--repeats", "1", "--baseline-gpus", "50"])
    assert "scaled linearly" in capsys.readouterr().out
    assert out["baseline_scaled"] is True
    assert out["agree"] is True
