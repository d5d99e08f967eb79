"""The serving behaviour draws its bursts, gaps and evening quiet from the GenTD26 dev trace's
statistics; observed once a minute it must show them, and the default rules must treat it as
the trace's pods: left alone between bursts, stopped hours into the quiet, never a false kill."""

from __future__ import annotations

import numpy as np
import pytest

from gpusteward.integrations.sim import Behaviour
from gpusteward.integrations.sim.behaviours import SERVE_DRIZZLE_PER_H, SERVE_LEVEL

from .test_behaviours import H, col, runs_of, solo, trace


@pytest.mark.parametrize("seed", [1, 7, 42])
def test_a_day_of_short_bursts_then_a_quiet_evening(seed: int) -> None:
    cluster = solo(Behaviour.SERVING, run_h=24, waste_h=16, seed=seed)
    obs = trace(cluster, 0, 24 * H, 60)
    util, mem = col(obs, "gpu_util_pct"), col(obs, "mem_used_mib")
    busy = util >= 1
    day, evening = busy[: 16 * 60], busy[16 * 60 :]
    bursts = [n for _, n in runs_of(day)]
    gaps = [n for _, n in runs_of(~day)]
    # The trace's day: minute-scale bursts and gaps (medians 2 and 1.9 min), no gap near 90 min.
    assert 1 <= np.median(bursts) <= 4
    assert 1 <= np.median(gaps) <= 4
    assert max(gaps) <= 31
    lo, hi = SERVE_LEVEL
    assert lo - 5 <= np.median(util[: 16 * 60][day]) <= hi + 5
    # The evening: a stray request about SERVE_DRIZZLE_PER_H times an hour, never a burst.
    per_h = evening.sum() / 8
    assert 0.3 * SERVE_DRIZZLE_PER_H <= per_h <= 3 * SERVE_DRIZZLE_PER_H
    assert max(n for _, n in runs_of(evening)) <= 2
    # The model stays resident all along: released memory is no sign of an ended service.
    assert (mem > 0).all()


def test_the_bursty_kind_never_goes_quiet() -> None:
    cluster = solo(Behaviour.SERVING, run_h=24, waste_h=0, seed=3)
    obs = trace(cluster, 0, 24 * H, 60)
    busy = col(obs, "gpu_util_pct") >= 1
    assert max(n for _, n in runs_of(~busy)) < 70  # gaps of at most ~65 min, all day
    for hour in range(0, 23, 3):  # busy in every 3-hour stretch well above the rule's 5 %
        assert busy[hour * 60 : (hour + 3) * 60].mean() > 0.05
    (truth,) = cluster.truths()
    assert truth.wasteful_from is None
