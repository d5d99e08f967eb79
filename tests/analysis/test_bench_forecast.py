"""The forecast benchmark runs end to end on a short slice of the Helios month (no timing asserted)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("statsmodels")


def test_bench_prints_model_and_baseline_measured_in_the_same_run(load_bench, capsys) -> None:
    bench = load_bench("forecast")
    out = bench.main(
        ["--days", "5", "--warmup-days", "3", "--every-hours", "3", "--simulations", "50", "--json"]
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed == out
    assert {"mae", "mape", "naive_mae", "naive_mape", "ratio", "fit_seconds_total"} <= set(printed)
    assert printed["origins"] == 16  # two days after the warm-up, every three hours
    assert printed["refits"] == 2
    assert printed["ratio"] == pytest.approx(printed["mae"] / printed["naive_mae"], abs=1e-3)
    # On this slice, as on the month, the model beats "the same time yesterday".
    assert printed["mae"] < printed["naive_mae"]
    assert 0 <= printed["band_coverage"] <= 1
