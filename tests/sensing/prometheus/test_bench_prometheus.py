"""The Prometheus benchmark runs end to end at a tiny size on a real Prometheus (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "prometheus.py"


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_prometheus", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_bench_smoke(need_prom: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = load_bench().main(["--gpus", "50", "--repeats", "1", "--json", "--workdir", str(tmp_path)])
    printed = json.loads(capsys.readouterr().out)
    assert printed == out
    assert {"gpus", "promql_ms", "analysis_ms", "fetch_ms", "ratio_promql_over_analysis"} <= set(out)
    assert out["gpus"] == 50
    assert out["zombies_planted"] > 0  # the agreement is about something
    assert out["agree"] is True
