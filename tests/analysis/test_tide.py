"""Low-load windows and replica plans from hand-made forecasts (no model involved)."""

from __future__ import annotations

import numpy as np
import pytest

from gpusteward.analysis.forecast import Forecast
from gpusteward.analysis.tide import PoolLimits, low_load_windows, plan_replicas, replicas_for

STEP = 900.0
T0 = 1_700_000_000.0 - (1_700_000_000.0 % STEP)


def fc(mean: list[float], band: float | list[float] = 0.0) -> Forecast:
    m = np.asarray(mean, dtype=float)
    b = np.broadcast_to(np.asarray(band, dtype=float), m.shape)
    return Forecast(T0, STEP, m, np.maximum(m - b, 0), m + b, 0.9, "daily")


def test_low_load_windows_are_runs_under_the_threshold_long_enough() -> None:
    f = fc([9, 2, 2, 2, 9, 1, 9, 3, 3], band=0.5)
    windows = low_load_windows(f, threshold=4.0, min_minutes=30)
    assert [(w.start_s - T0, w.end_s - T0) for w in windows] == [(900, 3600), (6300, 8100)]
    assert windows[0].minutes == 45
    assert windows[0].peak_upper == 2.5
    # the single low bucket (15 min) is too short; a band crossing the threshold breaks a run
    assert low_load_windows(fc([2, 2, 2], band=[0, 3, 0]), threshold=4.0, min_minutes=15)[0].minutes == 15


LIMITS = PoolLimits(
    gpus_per_replica=2, min_replicas=1, max_replicas=10, slo_headroom=0.25, prewarm_minutes=30
)


@pytest.mark.parametrize(
    ("demand", "expected"),
    [(0, 1), (1.5, 1), (1.6, 2), (3.0, 2), (14.9, 10), (40, 10)],  # a replica carries 1.5 GPUs
)
def test_replicas_for_keeps_the_headroom_within_limits(demand: float, expected: int) -> None:
    assert replicas_for(demand, LIMITS) == expected


# (name, forecast mean, band, current, demand now, target, held)
CASES = [
    ("steady", [4, 4, 4, 4, 4, 4], 0.2, 3, 0.0, 3, ""),
    ("trough: scale down", [1, 1, 1, 1, 8, 8], 0.3, 6, 0.0, 1, ""),
    # the peak comes within the pre-warm + replan look-ahead (45 min): no scale down
    ("peak ahead: stay", [1, 1, 8, 8, 8, 8], 0.3, 6, 0.0, 6, ""),
    ("pre-warm before the peak", [1, 1, 8, 8, 8, 8], 0.3, 1, 0.0, 6, ""),
    ("uncertain band: hold", [1, 1, 1, 1, 1, 1], 1.4, 6, 0.0, 6, "uncertain"),
    ("never below min", [0, 0, 0, 0, 0, 0], 0.0, 4, 0.0, 1, ""),
    ("never below what is used now", [1, 1, 1, 1, 1, 1], 0.1, 6, 5.0, 4, ""),
    ("never above max", [40, 40, 40, 40, 40, 40], 0.0, 2, 0.0, 10, ""),
]


@pytest.mark.parametrize(("name", "mean", "band", "current", "now_demand", "target", "held"), CASES)
def test_plan(
    name: str, mean: list[float], band: float, current: int, now_demand: float, target: int, held: str
) -> None:
    plan = plan_replicas("web", fc(mean, band), T0 + 60, current, LIMITS, demand_now=now_demand)
    assert (plan.target, plan.held) == (target, held), plan.reason
    assert plan.changes == (target != current)
    if held:
        assert "uncertainty" in plan.reason
        assert "headroom" in plan.reason


def test_plan_says_when_to_prewarm_for_the_next_peak() -> None:
    mean = [1] * 8 + [9] * 4  # a peak two hours ahead
    plan = plan_replicas("web", fc(mean, 0.2), T0, 6, LIMITS)
    assert plan.target == 1
    assert plan.next_rise_s == pytest.approx(T0 + 8 * STEP - 30 * 60)
    assert "trough" in plan.reason


def test_plan_without_forecast_for_now_changes_nothing() -> None:
    plan = plan_replicas("web", fc([1, 1]), T0 + 10 * STEP, 3, LIMITS)
    assert (plan.target, plan.held) == (3, "no-forecast")
