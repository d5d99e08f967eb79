"""The Slurm benchmark runs end to end at a tiny size (no timing is asserted)."""

from __future__ import annotations

import json


def test_bench_runs_and_the_join_is_right(load_bench, capsys):
    out = load_bench("slurm").main(["--jobs", "40", "--repeats", "1", "--json"])
    assert json.loads(capsys.readouterr().out) == out
    assert out["jobs"] == 40
    assert out["running_jobs"] == 36  # every tenth job is pending
    assert out["agree"] is True
    assert {"baseline_ms", "parse_ms", "observe_ms", "parse_ratio", "observe_ratio"} <= set(out)
