"""How a demand forecast is judged: the seasonal-naive baseline it must beat and the error
measures (MAE, MAPE) both are scored by."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gpusteward.analysis.forecast import DAY_S, FloatArray, Series


def seasonal_naive(series: Series, horizon_steps: int, season_s: float = DAY_S) -> FloatArray:
    """The baseline: each future bucket takes the value one season (a day) earlier."""
    p = round(season_s / series.step_s)
    idx = np.arange(len(series), len(series) + horizon_steps) - p
    out = np.full(horizon_steps, np.nan)
    ok = (idx >= 0) & (idx < len(series))
    out[ok] = series.values[idx[ok]]
    return out


def errors(actual: Sequence[float], predicted: Sequence[float]) -> dict[str, float]:
    """MAE, and MAPE (percent) over the buckets whose actual value is not zero (MAPE is
    undefined there); ``mape_points`` says how many that was."""
    a = np.asarray(actual, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(p)
    a, p = a[ok], p[ok]
    nz = np.abs(a) > 1e-9
    return {
        "mae": float(np.mean(np.abs(a - p))) if a.size else math.nan,
        "mape": float(100 * np.mean(np.abs(a[nz] - p[nz]) / np.abs(a[nz]))) if nz.any() else math.nan,
        "points": int(a.size),
        "mape_points": int(nz.sum()),
    }
