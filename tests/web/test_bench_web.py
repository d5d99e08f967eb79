"""The state-and-pages benchmark at a tiny size on PostgreSQL (no timing is asserted)."""

from __future__ import annotations

import json

import pytest


def test_bench_scales_the_state_and_loads_the_pages(
    load_bench, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench("web")
    args = ["--gpus", "128", "--days", "0.125", "--calib-hours", "1", "--readers", "4", "--requests", "70"]
    args += ["--writes-every", "0.05"]  # the loop's writes, often enough to land in a short run
    out = bench.main([*args, "--json"])
    assert json.loads(capsys.readouterr().out) == out
    # 128 GPUs: 2 copies of the 64-GPU simulation side by side, over 3 periods of 1 h.
    assert out["copies"] == 6
    rows = out["rows"]
    for table in ("finding_episodes", "decisions", "actions", "notices", "audit_log", "workloads"):
        assert rows[table] > 0, table  # the agent wrote some, so the copies are of something
        assert rows[table] % 6 == 0, table  # every row copied once per copy, none lost or doubled
    assert out["db_bytes_empty"] < out["calibration_db_bytes"] < out["db_bytes"]
    # A month is 240 times the 3 simulated hours, less the empty schema.
    grown = out["db_bytes"] - out["db_bytes_empty"]
    assert out["db_bytes_per_month"] == pytest.approx(out["db_bytes_empty"] + grown * 240, rel=1e-6)
    assert out["requests"] == 70
    assert out["overview_ms"] > 0
    assert out["overview_actions_24h"] > 0  # at the data's end its last day holds actions
    assert set(out["p95_ms_by_path"]) == set(bench.PATHS)
    assert all(v > 0 for v in out["p95_ms_by_path"].values())
    assert max(out["p95_ms_by_path"].values()) >= out["p95_ms"] >= min(out["p95_ms_by_path"].values())
    # Ratios are printed to two decimals.
    assert out["ratio_p95_over_baseline"] == pytest.approx(out["p95_ms"] / out["baseline_p95_ms"], abs=0.006)
    assert out["p95_within_target"] == (out["p95_ms"] <= 300.0)
    # The same load with web.read_cache off, for the comparison; the writer wrote in both runs.
    assert out["writes"] > 0
    assert out["no_cache_writes"] > 0
    assert out["ratio_p95_no_cache_over_cache"] == pytest.approx(
        out["no_cache_p95_ms"] / out["p95_ms"], abs=0.006
    )
