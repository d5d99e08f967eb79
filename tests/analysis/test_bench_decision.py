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


def test_bench_decision_holdout_scores_a_share_of_the_pods(
    load_bench, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench("decision")
    ids = [f"pod{i:02d}" for i in range(30)]
    a, b = bench.holdout(ids, 1, 0.33), bench.holdout(ids, 2, 0.33)
    assert len(a) == len(b) == 10
    assert a == bench.holdout(ids, 1, 0.33)  # the same seed, the same pods
    assert a != b
    assert a <= set(ids)
    out = bench.main(
        ["--pods", "6", "--hours", "6", "--holdout-seed", "1", "--holdout-share", "0.5", "--json"]
    )
    capsys.readouterr()
    held = bench.holdout(bench.pod_ids(bench.TRACE), 1, 0.5)
    first_six = set(bench.pod_ids(bench.TRACE)[:6])
    assert out["holdout_seed"] == 1
    assert out["workloads"] == len(held & first_six)
    assert out["regrets"] == 0
