"""The nvml benchmark runs end to end at a tiny size (no timing is asserted)."""

from __future__ import annotations

import json

import pytest


def test_bench_runs_and_reports_every_figure(load_bench, capsys: pytest.CaptureFixture[str]) -> None:
    out = load_bench("nvml").main(["--gpus", "2", "--procs", "3", "--repeats", "2", "--ticks", "3", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == out
    assert (out["gpus"], out["procs_per_gpu"], out["agent_ticks"]) == (2, 3, 3)
    # Differences of two timings may come out negative at this size: only their presence is checked.
    for key in (
        "pass_us_per_gpu",
        "pass_us_per_process",
        "observe_us_per_process",
        "choke_ratio",
        "scrape_ratio",
    ):
        assert isinstance(out[key], float), key
    assert out["scrape_ms"] > 0
    assert out["rss_mb"] > 0
    assert out["rss_baseline_mb"] < out["rss_mb"]
    assert out["rss_target_mb"] == 150.0
    # CPU over 3 passes at 10 s: some CPU time, a share of the simulated 30 s, the baseline beside it.
    assert out["interval_s"] == 10
    assert 0 < out["agent_cpu_s"] < 30
    assert out["cpu_pct_of_core"] == pytest.approx(100 * out["agent_cpu_s"] / 30, abs=0.01)
    assert out["cpu_baseline_pct_of_core"] > 0
    assert out["cpu_target_pct"] == 1.0
    assert out["cpu_within_target"] == (out["cpu_pct_of_core"] <= 1.0)
    # 2 GPUs x 3 processes: 6 series in each per-process family.
    assert out["scrape_series"] > 6 * 3
    # The agent's last scrape exports as much as the first (each pass brings new per-process
    # samples, as NVML's timestamps move).
    assert out["agent_scrape_series"] == out["scrape_series"]
    # The exporter alone, scraped over HTTP as Prometheus scrapes it: OpenMetrics, gzipped, the
    # same series; its own CPU time and memory, under what the agent in node mode holds.
    assert out["exporter_scrape_series"] == out["scrape_series"]
    assert out["exporter_scrape_encoding"] == "gzip"
    assert out["exporter_scrape_content_type"].startswith("application/openmetrics-text")
    assert out["exporter_cpu_s"] >= 0  # whole clock ticks of /proc: a tiny run may use less than one
    assert out["exporter_cpu_pct_of_core"] == pytest.approx(100 * out["exporter_cpu_s"] / 30, abs=0.01)
    assert out["exporter_cpu_within_target"] == (out["exporter_cpu_pct_of_core"] <= 1.0)
    assert out["rss_baseline_mb"] < out["exporter_rss_mb"] < out["rss_mb"]
