"""The backtest's scoring contract, checked against hand-computed examples.

Every trace here has one sample a minute from t=0; a stop at minute s looks at the samples
of minutes s+1 .. s+horizon.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpusteward.domain.models import Gpu, Owner
from gpusteward.integrations.replay import Trace, TraceWorkload
from gpusteward.scenarios.scoring import Scorer, Scoring

NAN = math.nan


def trace(*per_workload: list[list[float]]) -> Trace:
    """Workload i holds the GPUs listed in ``per_workload[i]``, each a list of per-minute utilisations
    (NaN: the scrape is missing)."""
    t, gpu, util, wl, workloads, gpus = [], [], [], [], [], []
    for i, series in enumerate(per_workload):
        mine = []
        for values in series:
            g = len(gpus)
            gpus.append(Gpu(f"g{g}", "n", g, "", 0))
            mine.append(g)
            for k, v in enumerate(values):
                if v == v:
                    t.append(60.0 * k)
                    gpu.append(g)
                    util.append(v)
                    wl.append(i)
        ts = np.asarray(t)[np.asarray(wl) == i]
        workloads.append(TraceWorkload(f"w{i}", f"w{i}", Owner("u"), tuple(mine), 0.0, ts.min(), ts.max()))
    return Trace(name="t", gpus=gpus, t=t, gpu=gpu, util=util, wl=wl, workloads=workloads)


HOUR = 60  # samples


@pytest.mark.parametrize(
    ("values", "stop_min", "busy_after", "false_kill", "reclaimed_h"),
    [
        # 9 busy samples (>= 1 %) after the stop: under the line of 10, reclaimed to the last sample.
        ([0.0] * 60 + [2.0] * 9 + [0.0] * 111, 59, 9, False, 120 / 60),
        # The tenth busy sample makes it a false kill: nothing reclaimed.
        ([0.0] * 60 + [2.0] * 10 + [0.0] * 110, 59, 10, True, 0.0),
        # Under 1 % is not busy, however many samples.
        ([0.0] * 60 + [0.9] * 120, 59, 0, False, 120 / 60),
        # Exactly 1 % is busy.
        ([0.0] * 60 + [1.0] * 10 + [0.0] * 110, 59, 10, True, 0.0),
        # Busy samples spread thinly (one every 30 min for 8 h): 12 within 6 h, a false kill.
        ([0.0] * 30 + [5.0 if k % 30 == 29 else 0.0 for k in range(8 * HOUR)], 29, 12, True, 0.0),
        # 10 busy samples, but the last 6 h + 1 min after the stop: only 9 count.
        ([0.0] * 10 + [0.0] * 351 + [3.0] * 10, 9, 9, False, 361 / 60),
        # The sample at the stop itself is not after the stop.
        ([0.0] * 10 + [50.0] + [0.0] * 50, 10, 0, False, 50 / 60),
        # Missing scrapes are neither busy nor idle; the last present sample ends the workload.
        ([0.0] * 10 + [NAN] * 20 + [0.0] * 10 + [NAN] * 5, 9, 0, False, 30 / 60),
    ],
)
def test_false_kill_and_reclaimed_per_stop(
    values: list[float], stop_min: int, busy_after: int, false_kill: bool, reclaimed_h: float
) -> None:
    s = Scorer(trace([values]))
    at = 60.0 * stop_min
    assert s.busy_after(0, at) == busy_after
    assert s.false_kill(0, at) is false_kill
    assert s.reclaimed_gpu_hours(0, at) == pytest.approx(reclaimed_h)


def test_every_gpu_of_a_workload_counts_and_gpus_multiply_the_hours() -> None:
    # 6 busy samples on each of two GPUs: 12 in all, a false kill; idle, the two GPUs give 2 x 1 h.
    busy = [[0.0] * 10 + [4.0] * 6 + [0.0] * 54] * 2
    idle = [[0.0] * 70] * 2
    s = Scorer(trace(busy, idle))
    assert (s.busy_after(0, 540.0), s.false_kill(0, 540.0)) == (12, True)
    assert s.reclaimed_gpu_hours(1, 600.0) == pytest.approx(2 * 59 / 60)


@pytest.mark.parametrize(
    ("scoring", "false_kill"),
    [
        (Scoring(), True),  # 10 samples at 5 % within 6 h
        (Scoring(busy_pct=10.0), False),  # at 10 % they are not busy
        (Scoring(busy_samples=11), False),
        (Scoring(horizon_s=5 * 60.0), False),  # only 5 of them within 5 min
    ],
)
def test_the_three_numbers_are_settings(scoring: Scoring, false_kill: bool) -> None:
    s = Scorer(trace([[0.0] * 10 + [5.0] * 10 + [0.0] * 10]), scoring)
    assert s.false_kill(0, 540.0) is false_kill


def test_the_oracle_stops_at_the_earliest_sample_that_is_not_a_false_kill() -> None:
    # Busy for 30 min, then 4.5 h idle with a drizzle of 9 busy samples: the oracle stops at
    # the burst's last sample (only the drizzle's 9 follow); a minute earlier 10 would.
    burst = [50.0] * 30
    drizzle = [2.0 if k % 30 == 0 else 0.0 for k in range(270)]  # 9 busy samples
    always = [50.0] * 100  # busy to the end: the oracle stops at the 91st minute (9 left)
    s = Scorer(trace([burst + drizzle], [always]))
    assert s.oracle_stop(0) == pytest.approx(60.0 * 29)
    assert s.oracle_stop(1) == pytest.approx(60.0 * 90)
    assert s.oracle_gpu_hours() == pytest.approx((299 - 29) / 60 + (99 - 90) / 60)
