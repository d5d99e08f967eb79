"""The interruption benchmark runs end to end at a tiny size (no timing is asserted)."""

from __future__ import annotations

import json

import pytest


def test_bench_runs_and_every_process_is_signalled(load_bench, capsys):
    out = load_bench("interruption").main(["--gpus", "2", "--procs", "2", "--repeats", "1", "--json"])
    assert json.loads(capsys.readouterr().out) == out
    assert out["processes"] == 4
    assert out["all_signalled"] is True
    # Both figures are rounded (4 and 5 places), so compare within the rounding, not exactly.
    assert out["share_of_warning"] == pytest.approx(out["notice_to_last_signal_s"] / 120, abs=1e-5)
    assert {"step_s", "tick_s", "baseline_s", "baseline_ratio"} <= set(out)
