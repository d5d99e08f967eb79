"""The Prometheus benchmark runs end to end at a tiny size on a real Prometheus (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_bench_smoke(load_bench, need_prom: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = load_bench("prometheus").main(
        ["--gpus", "50", "--repeats", "1", "--json", "--workdir", str(tmp_path)]
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed == out
    assert {"gpus", "promql_ms", "analysis_ms", "fetch_ms", "ratio_promql_over_analysis"} <= set(out)
    assert out["gpus"] == 50
    assert out["zombies_planted"] > 0  # the agreement is about something
    assert out["agree"] is True
