"""The decision benchmark runs end to end on a cut of the shipped serving trace (no timing asserted)."""

from __future__ import annotations

import json

import pytest


def test_bench_decision_scores_three_policies(load_bench, capsys: pytest.CaptureFixture[str]) -> None:
    out = load_bench("decision").main(["--pods", "6", "--hours", "6", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == out
    assert {
        "regrets",
        "reclaimed_gpu_hours",
        "jds_reclaimed_gpu_hours",
        "ratio_over_jds",
        "oracle_gpu_hours",
    } <= set(printed)
    assert printed["workloads"] == 6
    # Nothing beats hindsight, and the default never stops a pod that serves again.
    assert printed["reclaimed_gpu_hours"] <= printed["oracle_gpu_hours"] + 1e-6
    assert printed["regrets"] == 0
