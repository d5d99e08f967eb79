"""The consolidation benchmark runs end to end on a cut of the shipped serving trace."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import ModuleType

import pytest


def test_bench_consolidation_plans_and_replays_a_cut(
    load_bench: Callable[[str], ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    out = load_bench("consolidation").main(["--pods", "12", "--hours", "6", "--plan-hours", "3", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == out
    assert printed["workloads"] == printed["gpus_before"] == 12
    assert 1 <= printed["gpus_after"] <= printed["naive_gpus_after"] <= 12
    assert printed["memory_violations"] == 0
    assert printed["peak_memory_share"] <= 1.0
    assert printed["saved_share"] == pytest.approx(1 - printed["gpus_after"] / 12, abs=1e-4)
    assert 2.9 <= printed["replay_hours"] <= 3.1
