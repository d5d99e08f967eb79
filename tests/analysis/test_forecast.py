"""Forecasts on synthetic series whose future is known, and on the real Helios month."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from gpusteward.analysis import forecast as fc
from gpusteward.analysis.forecast import (
    ForecastUnavailable,
    Series,
    bucket,
    fill_gaps,
    fit,
    forecast,
)
from gpusteward.analysis.forecast_scores import errors, seasonal_naive

pytest.importorskip("statsmodels")

STEP = 900.0  # 15 minutes
DAY = 96
HELIOS = (
    Path(__file__).resolve().parents[1]
    / "fixtures/traces/earth_vc3sl_cluster_sequence_vc_2020-05_per_minute.csv.gz"
)
# 2020-05-04 00:00 UTC, a Monday: the weekly pattern below starts on a weekday.
T0 = 1_588_550_400.0


def daily(n: int, *, level: float = 50.0, amp: float = 20.0) -> np.ndarray:
    i = np.arange(n)
    return level + amp * np.sin(2 * np.pi * i / DAY)


def weekly(n: int, rng: np.random.Generator, noise: float = 1.0) -> np.ndarray:
    """Daily tide, and weekends at 40 % of weekday demand."""
    i = np.arange(n)
    weekday = (i // DAY) % 7 < 5
    base = 20 + 30 * (1 + np.sin(2 * np.pi * (i % DAY) / DAY - np.pi / 2)) / 2
    return np.where(weekday, base, 0.4 * base) + rng.normal(0, noise, n)


def test_bucket_means_per_step_and_leaves_gaps_missing() -> None:
    t = [0, 60, 120, 1800 + 5, 1800 + 65, 3 * 900 + 1]
    v = [10, 20, 30, 40, 60, 7]
    s = bucket(t, v, 900)
    assert s.start_s == 0
    np.testing.assert_allclose(s.values[[0, 2, 3]], [20, 50, 7])
    assert np.isnan(s.values[1])  # no sample is missing data, not zero
    assert list(fill_gaps(s.values)) == [20, 35, 50, 7]


def test_pure_daily_tide_is_forecast_exactly() -> None:
    y = daily(10 * DAY)
    series = Series(T0, STEP, y[: 9 * DAY])
    model = fit(series, horizon_steps=8)
    assert model.seasonality == "daily"  # chosen by validation, not configured
    out = forecast(model, series, 24, simulations=0)
    truth = y[9 * DAY : 9 * DAY + 24]
    assert np.max(np.abs(out.mean - truth)) < 0.5  # amplitude 20
    assert out.start_s == series.end_s


def test_weekly_pattern_is_learnt_where_daily_alone_fails() -> None:
    rng = np.random.default_rng(3)
    n = 27 * DAY  # Monday 4 May + 27 days: the next day is a Sunday
    y = weekly(n + DAY, rng)
    series = Series(T0, STEP, y[:n])
    best = fit(series, horizon_steps=8)
    assert best.seasonality == "daily+weekly"
    assert best.validation_mae["daily+weekly"] < best.validation_mae["none"]
    truth = y[n : n + 24]  # six hours of a Sunday
    err_weekly = np.mean(np.abs(forecast(best, series, 24, simulations=0).mean - truth))
    daily_only = fit(series, seasonality="daily", horizon_steps=8)
    err_daily = np.mean(np.abs(forecast(daily_only, series, 24, simulations=0).mean - truth))
    assert err_weekly < 3.0
    assert err_weekly < 0.5 * err_daily


def test_no_clock_in_the_data_picks_no_seasonality() -> None:
    rng = np.random.default_rng(7)
    y = 40 + np.cumsum(rng.normal(0, 1, 10 * DAY))  # a random walk: only the level carries over
    model = fit(Series(T0, STEP, y), horizon_steps=8)
    assert model.seasonality == "none"


def test_band_covers_noise_of_known_size() -> None:
    rng = np.random.default_rng(11)
    sigma = 2.0
    y = 30 + rng.normal(0, sigma, 8 * DAY)
    series = Series(T0, STEP, y)
    model = fit(series, seasonality="none")
    out = forecast(model, series, 4, level=0.9, simulations=2000, seed=1)
    width = out.upper[0] - out.lower[0]
    assert 2 * 1.645 * sigma * 0.75 < width < 2 * 1.645 * sigma * 1.4
    assert np.all(out.lower <= out.mean)
    assert np.all(out.mean <= out.upper)
    assert abs(out.mean[0] - 30) < 2.5


def test_a_fitted_model_follows_new_data_without_refitting() -> None:
    rng = np.random.default_rng(5)
    y = 20 + np.cumsum(rng.normal(0, 0.5, 8 * DAY))  # demand that wanders: the level is what carries
    series = Series(T0, STEP, y)
    model = fit(series, seasonality="none")
    assert model.params["smoothing_level"] > 0.5
    jumped = Series(T0, STEP, np.concatenate([y, np.full(8, 60.0)]))  # two hours at a new level
    out = forecast(model, jumped, 4, simulations=0)
    assert np.all(np.abs(out.mean - 60) < 5)
    with pytest.raises(ValueError, match="not the one"):
        forecast(model, Series(T0 + STEP, STEP, y), 4)


def test_floor_keeps_demand_non_negative() -> None:
    y = np.concatenate([np.full(4 * DAY, 10.0), np.linspace(10, 0.5, DAY)])
    series = Series(T0, STEP, y)
    out = forecast(fit(series, seasonality="none"), series, 24, simulations=200)
    assert out.lower.min() >= 0
    assert out.mean.min() >= 0


@pytest.mark.parametrize(
    ("history_days", "seasonality", "problem"),
    [(0.1, "auto", "too little history"), (1.5, "daily", "two full cycles"), (10, "daily+weekly", "cycles")],
)
def test_too_little_history_is_a_clear_error(history_days: float, seasonality: str, problem: str) -> None:
    y = daily(int(history_days * DAY))
    with pytest.raises(ForecastUnavailable, match=problem):
        fit(Series(T0, STEP, y), seasonality=seasonality)  # type: ignore[arg-type]


def test_without_statsmodels_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "statsmodels.tsa.holtwinters", None)
    with pytest.raises(ForecastUnavailable, match=r"pip install 'gpusteward\[forecast\]'"):
        fit(Series(T0, STEP, daily(5 * DAY)))


def test_errors_leave_zero_demand_out_of_mape() -> None:
    e = errors([10, 0, 20, np.nan], [12, 3, 10, 5])
    assert e["mae"] == pytest.approx((2 + 3 + 10) / 3)
    assert e["mape"] == pytest.approx(100 * (0.2 + 0.5) / 2)
    assert (e["points"], e["mape_points"]) == (3, 2)


def test_seasonal_naive_is_the_same_time_yesterday() -> None:
    s = Series(T0, STEP, np.arange(2 * DAY, dtype=float))
    assert list(seasonal_naive(s, 3)) == [DAY, DAY + 1, DAY + 2]


def test_helios_two_hours_ahead_beats_same_time_yesterday() -> None:
    from gpusteward.runtime.demand import load_demand_csv

    table = load_demand_csv(HELIOS)
    series = bucket(table.times_s, table.values, STEP)
    assert len(series) == 31 * DAY
    start = 14 * DAY
    model = fit(series.head(start), horizon_steps=8)
    actual, model_pred, naive_pred = [], [], []
    for o in range(start, start + 3 * DAY, 6):  # every 90 minutes for three days, one fit
        hist = series.head(o)
        actual.append(series.values[o + 7])
        model_pred.append(forecast(model, hist, 8, simulations=0).mean[-1])
        naive_pred.append(seasonal_naive(hist, 8)[-1])
    ours, naive = errors(actual, model_pred), errors(actual, naive_pred)
    assert ours["points"] == 48
    assert ours["mae"] < 0.6 * naive["mae"]
    assert ours["mape"] < naive["mape"]


def test_module_imports_without_statsmodels_loaded() -> None:
    # The core imports forecast.py freely: statsmodels is only imported inside the functions.
    assert "statsmodels" not in fc.__dict__
