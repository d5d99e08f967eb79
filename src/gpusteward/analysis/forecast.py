"""Demand forecasts for a pool: bucketed history in, a forecast with a prediction band out.

The model is Holt-Winters in the form that handles two seasonalities: MSTL (statsmodels)
splits the series into a daily and a weekly seasonal component and a remainder, and a damped
additive-trend exponential smoothing model (statsmodels ``ExponentialSmoothing``) forecasts the
seasonally adjusted series; each seasonal component continues its last cycle. statsmodels'
own Holt-Winters takes one seasonal period only, and per-minute data make a weekly period of
10,080 steps, so the series is first bucketed (15 minutes by default: a day is 96 buckets, a
week 672).

Seasonality is not assumed: with ``seasonality="auto"`` each candidate (none, daily,
daily+weekly, as far as the history allows two full cycles) is fitted on the history less its
last two days and scored on h-step forecasts over those two days; the best one is refitted on
the whole history. On a tidal inference pool the seasonal models win; on a research cluster
whose allocation follows jobs rather than the clock (Helios) the plain damped trend does.

Fitting estimates parameters (slow: seconds with a weekly period); ``forecast`` re-runs the
fitted model with fixed parameters over the data that arrived since (milliseconds), so a
model is refitted about once a day and used every tick. The prediction band comes from
simulation: sample paths of the smoothing model driven by its own bootstrapped residuals.

statsmodels is an optional dependency (``pip install 'gpusteward[forecast]'``), imported only
here, inside the functions: without it ``ForecastUnavailable`` says what to install.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from gpusteward.domain.errors import StewardError

FloatArray = npt.NDArray[np.float64]
Seasonality = Literal["auto", "none", "daily", "daily+weekly"]
SEASONALITIES: tuple[str, ...] = ("none", "daily", "daily+weekly")
DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
#: Fewest buckets a forecast is made from (3 h at 15 minutes): a level and little else.
MIN_BUCKETS = 12
INSTALL_HINT = "forecasting needs statsmodels: pip install 'gpusteward[forecast]'"


class ForecastUnavailable(StewardError):
    """The forecast cannot be made: the optional dependency is missing or the history too short."""


def _statsmodels() -> tuple[Any, Any]:
    try:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing
        from statsmodels.tsa.seasonal import MSTL
    except ImportError as e:
        raise ForecastUnavailable(INSTALL_HINT) from e
    return ExponentialSmoothing, MSTL


@dataclass(frozen=True)
class Series:
    """A regular series: ``values[i]`` is the mean over ``[start_s + i*step_s, start_s + (i+1)*step_s)``.
    NaN is a bucket without data."""

    start_s: float
    step_s: float
    values: FloatArray

    def __len__(self) -> int:
        return int(self.values.size)

    @property
    def end_s(self) -> float:
        return self.start_s + len(self) * self.step_s

    def times(self) -> FloatArray:
        out: FloatArray = self.start_s + self.step_s * np.arange(len(self), dtype=np.float64)
        return out

    def head(self, n: int) -> Series:
        return Series(self.start_s, self.step_s, self.values[:n])

    def tail_from(self, start_s: float) -> Series:
        """The buckets starting at or after ``start_s``."""
        skip = max(0, math.ceil((start_s - self.start_s) / self.step_s - 1e-9))
        return Series(self.start_s + skip * self.step_s, self.step_s, self.values[skip:])


def bucket(times_s: npt.ArrayLike, values: npt.ArrayLike, step_s: float) -> Series:
    """Mean of the samples in each ``step_s`` bucket, aligned to multiples of ``step_s`` (UTC), so
    a daily period is a whole number of buckets whenever ``step_s`` divides a day."""
    if step_s <= 0:
        raise ValueError("step_s must be positive")
    t = np.asarray(times_s, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(t) & np.isfinite(v)
    t, v = t[keep], v[keep]
    if t.size == 0:
        return Series(0.0, step_s, np.empty(0))
    first = math.floor(t.min() / step_s)
    idx = (np.floor(t / step_s) - first).astype(np.int64)
    n = int(idx.max()) + 1
    sums = np.bincount(idx, weights=v, minlength=n)
    counts = np.bincount(idx, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return Series(first * step_s, step_s, means)


def fill_gaps(values: FloatArray) -> FloatArray:
    """Missing buckets interpolated linearly (held flat at the ends): the smoothing model needs a
    value everywhere, and a short gap says nothing about demand."""
    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(v)
    if ok.all() or not ok.any():
        return v.copy()
    i = np.arange(v.size)
    out: FloatArray = np.interp(i, i[ok], v[ok])
    return out


def periods_for(seasonality: str, step_s: float) -> tuple[int, ...]:
    day = round(DAY_S / step_s)
    if seasonality == "none":
        return ()
    if seasonality == "daily":
        return (day,)
    if seasonality == "daily+weekly":
        return (day, 7 * day)
    raise ValueError(f"unknown seasonality {seasonality!r}; one of {', '.join(SEASONALITIES)} or auto")


def _possible(seasonality: str, n: int, step_s: float) -> bool:
    # MSTL needs more than two full cycles of its longest period.
    return all(n > 2 * p for p in periods_for(seasonality, step_s))


@dataclass(frozen=True)
class FittedModel:
    """A fitted model of one series, ready to forecast from any later point of the same series."""

    seasonality: str
    periods: tuple[int, ...]
    start_s: float
    step_s: float
    #: Buckets of the series the model was fitted on (the series' length then).
    end_index: int
    #: The seasonally adjusted fit window, and where in the series it starts.
    adjusted: FloatArray
    adjusted_from: int
    #: Last full cycle of each seasonal component: component(i) = cycle[(i - end_index) % p].
    cycles: tuple[FloatArray, ...]
    params: Mapping[str, float]
    #: With ``auto``: each candidate's validation MAE (h-step, last two days of the history).
    validation_mae: Mapping[str, float] = field(default_factory=dict)

    def seasonal(self, index: npt.NDArray[np.int64]) -> FloatArray:
        """The sum of the seasonal components at absolute bucket indices of the series."""
        out = np.zeros(index.size, dtype=np.float64)
        for cycle, p in zip(self.cycles, self.periods, strict=True):
            out += cycle[(index - self.end_index) % p]
        return out


@dataclass(frozen=True)
class Forecast:
    """``mean``, ``lower`` and ``upper`` for the buckets starting at ``start_s``, ``step_s`` apart.
    The band holds the central ``level`` share of the simulated paths."""

    start_s: float
    step_s: float
    mean: FloatArray
    lower: FloatArray
    upper: FloatArray
    level: float
    seasonality: str

    def __len__(self) -> int:
        return int(self.mean.size)

    def times(self) -> FloatArray:
        out: FloatArray = self.start_s + self.step_s * np.arange(len(self), dtype=np.float64)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": self.start_s,
            "step_seconds": self.step_s,
            "level": self.level,
            "seasonality": self.seasonality,
            "mean": [round(float(x), 3) for x in self.mean],
            "lower": [round(float(x), 3) for x in self.lower],
            "upper": [round(float(x), 3) for x in self.upper],
        }


def _decompose(y: FloatArray, periods: tuple[int, ...]) -> FloatArray:
    """Seasonal components, one column per period (none: zero columns)."""
    if not periods:
        return np.zeros((y.size, 0))
    _, mstl = _statsmodels()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = mstl(y, periods=list(periods)).fit()
    seas: FloatArray = np.asarray(res.seasonal, dtype=np.float64).reshape(y.size, -1)
    if seas.shape[1] != len(periods):  # MSTL drops a period it cannot fit; we checked beforehand
        raise ForecastUnavailable(f"MSTL kept {seas.shape[1]} of the periods {periods}")
    return seas


def _smoother(adjusted: FloatArray, params: Mapping[str, float] | None) -> Any:
    """Damped additive-trend exponential smoothing: estimated when ``params`` is None, else run
    with those parameters and initial states (no optimisation)."""
    es, _ = _statsmodels()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter on flat stretches
        if params is None:
            return es(adjusted, trend="add", damped_trend=True, initialization_method="estimated").fit()
        model = es(
            adjusted,
            trend="add",
            damped_trend=True,
            initialization_method="known",
            initial_level=params["initial_level"],
            initial_trend=params["initial_trend"],
        )
        return model.fit(
            smoothing_level=params["smoothing_level"],
            smoothing_trend=params["smoothing_trend"],
            damping_trend=params["damping_trend"],
            optimized=False,
        )


_PARAMS = ("smoothing_level", "smoothing_trend", "damping_trend", "initial_level", "initial_trend")


def _fit_one(series: Series, seasonality: str, window: int) -> FittedModel:
    n = len(series)
    lo = max(0, n - window)
    y = fill_gaps(series.values[lo:])
    if not np.isfinite(y).any():
        raise ForecastUnavailable("the history has no data")
    periods = periods_for(seasonality, series.step_s)
    seas = _decompose(y, periods)
    adjusted = y - seas.sum(axis=1)
    res = _smoother(adjusted, None)
    params = {k: float(res.params[k]) for k in _PARAMS}
    cycles = tuple(np.ascontiguousarray(seas[-p:, j]) for j, p in enumerate(periods))
    return FittedModel(seasonality, periods, series.start_s, series.step_s, n, adjusted, lo, cycles, params)


def _h_step_errors(model: FittedModel, series: Series, origins: range, h: int) -> FloatArray:
    """|actual - forecast| of the ``h``-step forecast from each origin (the last bucket seen).

    Runs the fitted model over the series once and reads each origin's level and trend: the
    damped-trend forecast is level + trend * (phi + ... + phi^h), plus the seasonal components."""
    adjusted = _adjusted(model, series)
    res = _smoother(adjusted, model.params)
    phi = model.params["damping_trend"]
    damp = sum(phi**i for i in range(1, h + 1))
    at = np.asarray(list(origins), dtype=np.int64)
    rel = at - model.adjusted_from
    fc = np.asarray(res.level)[rel] + np.asarray(res.trend)[rel] * damp + model.seasonal(at + h)
    actual = series.values[at + h]
    out: FloatArray = np.abs(actual - fc)
    return out[np.isfinite(out)]


def _adjusted(model: FittedModel, series: Series) -> FloatArray:
    """The fit window's adjusted values, then the buckets since, less the continued seasonality."""
    if abs(series.start_s - model.start_s) > 1e-6 or series.step_s != model.step_s:
        raise ValueError("the series is not the one the model was fitted on")
    if len(series) < model.end_index:
        raise ValueError("the series is shorter than when the model was fitted")
    new_idx = np.arange(model.end_index, len(series), dtype=np.int64)
    raw = series.values[model.end_index :]
    if raw.size and not np.isfinite(raw).all():
        # Gaps since the fit continue from the last known value (interpolated where possible).
        prev = model.adjusted[-1] + model.seasonal(np.asarray([model.end_index - 1]))[0]
        raw = fill_gaps(np.concatenate([[prev], raw]))[1:]
    return np.concatenate([model.adjusted, raw - model.seasonal(new_idx)])


def fit(
    series: Series,
    *,
    seasonality: Seasonality = "auto",
    horizon_steps: int = 8,
    window_days: float = 28.0,
    validation_days: float = 2.0,
) -> FittedModel:
    """Fit a model on ``series`` (its last ``window_days``).

    ``auto`` fits every seasonality the history supports on all but the last ``validation_days``
    and keeps the one with the lowest MAE of its ``horizon_steps``-ahead forecasts over those
    days (ties go to the simpler one). Raises ``ForecastUnavailable`` without statsmodels or
    with fewer than ``MIN_BUCKETS`` buckets of history.
    """
    _statsmodels()
    step = series.step_s
    window = max(1, round(window_days * DAY_S / step))
    n = min(len(series), window)
    if n < MIN_BUCKETS:
        raise ForecastUnavailable(
            f"too little history to forecast: {n} buckets of {step / 60:g} min (need {MIN_BUCKETS})"
        )
    if seasonality != "auto":
        if not _possible(seasonality, n, step):
            raise ForecastUnavailable(
                f"{seasonality} seasonality needs more than two full cycles of history "
                f"({n * step / DAY_S:.1f} days given)"
            )
        return _fit_one(series, seasonality, window)
    hold = round(validation_days * DAY_S / step)
    train = series.head(len(series) - hold)
    candidates = [s for s in SEASONALITIES if _possible(s, min(len(train), window), step)]
    if len(series) - hold < 8 or len(candidates) < 2:
        return _fit_one(series, candidates[0] if candidates else "none", window)
    scores: dict[str, float] = {}
    origins = range(len(train) - 1, len(series) - horizon_steps)
    for s in candidates:
        errors = _h_step_errors(_fit_one(train, s, window), series, origins, horizon_steps)
        scores[s] = float(errors.mean()) if errors.size else math.inf
    best = min(candidates, key=lambda s: (scores[s], SEASONALITIES.index(s)))
    model = _fit_one(series, best, window)
    return replace(model, validation_mae=scores)


def forecast(
    model: FittedModel,
    series: Series,
    horizon_steps: int,
    *,
    level: float = 0.9,
    simulations: int = 200,
    seed: int = 0,
    floor: float | None = 0.0,
    ceiling: float | None = None,
) -> Forecast:
    """Forecast the ``horizon_steps`` buckets after the end of ``series`` (the series the model was
    fitted on, possibly longer now). The band is the central ``level`` of ``simulations`` sample
    paths (0: no band, lower = upper = mean). Demand cannot go below ``floor`` or above ``ceiling``."""
    if horizon_steps < 1:
        raise ValueError("horizon_steps must be at least 1")
    res = _smoother(_adjusted(model, series), model.params)
    future = np.arange(len(series), len(series) + horizon_steps, dtype=np.int64)
    seasonal = model.seasonal(future)
    mean = np.asarray(res.forecast(horizon_steps), dtype=np.float64) + seasonal
    if simulations > 0:
        paths = _simulate(res, horizon_steps, simulations, seed) + seasonal[:, None]
        tail = (1.0 - level) / 2.0
        lower, upper = np.quantile(paths, [tail, 1.0 - tail], axis=1)
        lower, upper = np.minimum(lower, mean), np.maximum(upper, mean)
    else:
        lower, upper = mean.copy(), mean.copy()
    lo = -np.inf if floor is None else floor
    hi = np.inf if ceiling is None else ceiling
    return Forecast(
        start_s=series.end_s,
        step_s=series.step_s,
        mean=np.clip(mean, lo, hi),
        lower=np.clip(lower, lo, hi),
        upper=np.clip(upper, lo, hi),
        level=level,
        seasonality=model.seasonality,
    )


def _simulate(res: Any, steps: int, repetitions: int, seed: int) -> FloatArray:
    kwargs: dict[str, Any] = {"anchor": "end", "repetitions": repetitions, "random_errors": "bootstrap"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            sims = res.simulate(steps, rng=np.random.default_rng(seed), **kwargs)
        except TypeError:  # statsmodels < 0.15 names it random_state
            sims = res.simulate(steps, random_state=seed, **kwargs)
    return np.asarray(sims, dtype=np.float64).reshape(steps, repetitions)
