"""bench/prometheus.py's remote-write tick runs end to end at a tiny size on a real Prometheus,
names the same zombies through remote write, and prints issue 20's keys (no timing asserted)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from gpusteward.integrations.prometheus.localserver import binaries


def test_the_bench_prints_a_remote_write_tick(
    load_bench: Callable[[str], ModuleType], tmp_path: Path
) -> None:
    if binaries() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("prometheus not installed (apt-get install prometheus)")
        pytest.skip("prometheus not installed (apt-get install prometheus)")
    out = load_bench("prometheus").main(
        ["--gpus", "40", "--repeats", "1", "--json", "--workdir", str(tmp_path)]
    )
    assert {"tick_ms", "promql_pack_ms", "ratio_promql_pack_over_tick", "fetch_ms", "analysis_ms"} <= set(out)
    assert out["ratio_promql_pack_over_tick"] == round(out["promql_pack_ms"] / out["tick_ms"], 2)
    assert out["zombies_planted"] > 0
    assert out["agree_remote_write"] is True
    assert out["zombies_remote_write"] == out["zombies_planted"]
    # The mean is taken over a whole round of the ledger's writes (300 s at 30 s ticks).
    assert (out["ledger_flush_seconds"], out["ticks"]) == (300, 10)
    assert out["tick_max_ms"] >= out["tick_ms"]
    # The source's part is timed inside each tick: a part of it, never more.
    assert 0 < out["remote_write_observe_ms"] < out["tick_max_ms"]
