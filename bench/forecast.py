"""Benchmark: how well the demand forecast predicts 2 hours ahead, against a seasonal-naive baseline.

On the Helios one-month per-minute series (SenseTime Earth, virtual cluster vc3sl, May 2020:
GPUs allocated out of 64), bucketed to 15 minutes, a rolling origin walks through the month:
at every origin (hourly, after a warm-up of two weeks) the model forecasts the next 2 hours
from the history up to the origin only, and the bucket 2 hours ahead is scored. The model is
refitted every 24 hours (seasonality chosen by validation) and re-run with fixed parameters in
between, as the agent does. In the same run the seasonal-naive baseline ("the same time
yesterday") and persistence ("the last bucket") are scored on the same buckets.

    python bench/forecast.py --json

prints ``{"mae", "mape", "naive_mae", "naive_mape", "ratio", ...}``; ``ratio`` is mae/naive_mae
(below 1: the model beats the baseline). MAPE leaves out buckets where demand was 0.
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gpusteward.analysis.forecast import bucket, fit, forecast
from gpusteward.analysis.forecast_scores import errors
from gpusteward.runtime.demand import load_demand_csv

HELIOS = (
    Path(__file__).resolve().parents[1]
    / "tests/fixtures/traces/earth_vc3sl_cluster_sequence_vc_2020-05_per_minute.csv.gz"
)


def run(
    path: Path,
    *,
    column: str | None,
    step_min: float,
    horizon_h: float,
    every_h: float,
    refit_h: float,
    warmup_days: float,
    days: float | None,
    simulations: int,
    seasonality: str,
) -> dict[str, object]:
    table = load_demand_csv(path, column)
    t0 = float(table.times_s.min())
    keep = table.times_s < t0 + days * 86_400 if days else np.ones(table.times_s.size, bool)
    series = bucket(table.times_s[keep], table.values[keep], step_min * 60)
    step = series.step_s
    h = round(horizon_h * 3600 / step)
    day = round(86_400 / step)
    every, refit = max(1, round(every_h * 3600 / step)), max(1, round(refit_h * 3600 / step))
    origins = range(round(warmup_days * day), len(series) - h + 1, every)
    model, fitted_at = None, -(10**9)
    fit_s, fc_s, chosen = 0.0, 0.0, collections.Counter[str]()
    actual, pred, naive, last, inside = [], [], [], [], []
    for o in origins:  # ``o`` buckets are known; the target is bucket o + h - 1
        hist = series.head(o)
        if model is None or o - fitted_at >= refit:
            started = time.perf_counter()
            model = fit(hist, seasonality=seasonality, horizon_steps=h)  # type: ignore[arg-type]
            fit_s += time.perf_counter() - started
            fitted_at = o
            chosen[model.seasonality] += 1
        started = time.perf_counter()
        f = forecast(model, hist, h, simulations=simulations)
        fc_s += time.perf_counter() - started
        target = o + h - 1
        a = float(series.values[target])
        actual.append(a)
        pred.append(float(f.mean[-1]))
        naive.append(float(series.values[target - day]) if target >= day else float("nan"))
        last.append(float(series.values[o - 1]))
        inside.append(bool(f.lower[-1] - 1e-9 <= a <= f.upper[-1] + 1e-9))
    m, n, p = errors(actual, pred), errors(actual, naive), errors(actual, last)
    return {
        "series": f"{path.name}:{table.column}",
        "step_minutes": step_min,
        "horizon_hours": horizon_h,
        "origins": len(actual),
        "mae": round(m["mae"], 3),
        "mape": round(m["mape"], 2),
        "naive_mae": round(n["mae"], 3),
        "naive_mape": round(n["mape"], 2),
        "ratio": round(m["mae"] / n["mae"], 3),
        "mape_ratio": round(m["mape"] / n["mape"], 3),
        "persistence_mae": round(p["mae"], 3),
        "persistence_mape": round(p["mape"], 2),
        "mape_points": m["mape_points"],
        "band_level": 0.9 if simulations else None,
        "band_coverage": round(float(np.mean(inside)), 3) if simulations else None,
        "refits": sum(chosen.values()),
        "seasonality_chosen": dict(chosen),
        "fit_seconds_total": round(fit_s, 2),
        "fit_seconds_mean": round(fit_s / max(1, sum(chosen.values())), 3),
        "forecast_ms_mean": round(1e3 * fc_s / max(1, len(actual)), 2),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=HELIOS, help="demand CSV (default: the Helios month)")
    ap.add_argument("--column", default=None, help="value column (default: running_gpu_num)")
    ap.add_argument("--step-minutes", type=float, default=15.0)
    ap.add_argument("--horizon-hours", type=float, default=2.0)
    ap.add_argument("--every-hours", type=float, default=1.0, help="hours between two origins")
    ap.add_argument("--refit-hours", type=float, default=24.0)
    ap.add_argument("--warmup-days", type=float, default=14.0)
    ap.add_argument("--days", type=float, default=None, help="use only the first N days (smoke tests)")
    ap.add_argument("--simulations", type=int, default=100, help="sample paths for the band (0: none)")
    ap.add_argument("--seasonality", default="auto", choices=["auto", "none", "daily", "daily+weekly"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    out = run(
        args.trace,
        column=args.column,
        step_min=args.step_minutes,
        horizon_h=args.horizon_hours,
        every_h=args.every_hours,
        refit_h=args.refit_hours,
        warmup_days=args.warmup_days,
        days=args.days,
        simulations=args.simulations,
        seasonality=args.seasonality,
    )
    out["wall_seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:22} {v}")
    return out


if __name__ == "__main__":
    main()
