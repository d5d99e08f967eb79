"""The Slurm benchmark runs end to end at a tiny size (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench" / "slurm.py"


def test_bench_runs_and_the_join_is_right(capsys):
    spec = importlib.util.spec_from_file_location("bench_slurm", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    out = module.main(["--jobs", "40", "--repeats", "1", "--json"])
    assert json.loads(capsys.readouterr().out) == out
    assert out["jobs"] == 40
    assert out["running_jobs"] == 36  # every tenth job is pending
    assert out["agree"] is True
    assert {"baseline_ms", "parse_ms", "observe_ms", "parse_ratio", "observe_ratio"} <= set(out)
