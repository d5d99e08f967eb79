"""The interruption benchmark runs end to end at a tiny size (no timing is asserted)."""

from __future__ import annotations

import json


def test_bench_runs_and_every_process_is_signalled(load_bench, capsys):
    out = load_bench("interruption").main(["--gpus", "2", "--procs", "2", "--repeats", "1", "--json"])
    assert json.loads(capsys.readouterr().out) == out
    assert out["processes"] == 4
    assert out["all_signalled"] is True
    assert out["share_of_warning"] == round(out["notice_to_last_signal_s"] / 120, 5)
    assert {"step_s", "tick_s", "baseline_s", "baseline_ratio"} <= set(out)
