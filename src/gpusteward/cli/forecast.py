"""``gpusteward forecast`` (pool demand ahead, low-load windows) and ``gpusteward advise``
(right-sizing advice and anomalies for the running workloads)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, cast

import numpy as np
import typer
from rich.table import Table

from gpusteward.analysis.forecast import Seasonality, Series, bucket, fit, forecast
from gpusteward.analysis.tide import low_load_windows
from gpusteward.cli import output
from gpusteward.cli.exits import exit_on_errors, fail
from gpusteward.domain.models import RuleAction, utc
from gpusteward.domain.ports import SystemClock
from gpusteward.report.charts import bar_chart
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.runtime.demand import load_demand_csv, observation_demand, parse_time
from gpusteward.runtime.insights import Insights
from gpusteward.runtime.registry import build_integration

out = output.console()

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Config file (YAML); its forecast section sets the defaults."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object for scripts instead of tables.")]


def _from_source(
    settings: Settings, source: str | None, hours: float, step_s: float, pool: str | None
) -> Series:
    integration = build_integration(settings, SystemClock(), source)
    try:
        now = SystemClock().now()
        history = integration.history(now - timedelta(hours=hours), now, min(step_s, 300.0))
    finally:
        integration.source.close()
    if not history:
        fail(f"the {integration.source.name} source keeps no history to forecast from; use --trace FILE", 1)
    measure = next((p.demand for p in settings.forecast.pools if p.name == pool), "busy")
    members = {p.name: p.workloads for p in settings.forecast.pools if p.workloads}
    per = [observation_demand(o, measure=measure, members=members) for o in history]
    pools = sorted({p for d in per for p in d})
    name = pool or (pools[0] if len(pools) == 1 else None)
    if name is None:
        fail(f"several pools in the history ({', '.join(pools)}): choose one with --pool", 2)
    times = [o.at.timestamp() for o, d in zip(history, per, strict=True) if name in d]
    if not times:
        fail(f"no demand of pool {name!r} in the history; pools: {', '.join(pools) or 'none'}", 2)
    return bucket(times, [d[name] for d in per if name in d], step_s)


def forecast_command(
    trace: Annotated[
        Path | None,
        typer.Option(
            help="Demand CSV: a time column and a value column (the Helios cluster sequence works)."
        ),
    ] = None,
    column: Annotated[
        str | None, typer.Option(help="Value column of the CSV (default: running_gpu_num, demand or value).")
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(help="Forecast from this time of the trace (RFC 3339 or epoch; default: its end)."),
    ] = None,
    pool: Annotated[
        str | None, typer.Option(help="Pool to forecast when reading the configured source.")
    ] = None,
    config: ConfigOpt = None,
    source: Annotated[
        str | None, typer.Option("--source", "-s", help="Override the configured source.")
    ] = None,
    history_hours: Annotated[float, typer.Option(help="History to read from the source.")] = 14 * 24,
    horizon_hours: Annotated[
        float | None, typer.Option(help="How far ahead (default: forecast.horizon_hours).")
    ] = None,
    bucket_minutes: Annotated[
        float | None, typer.Option(help="Bucket size (default: forecast.bucket_minutes).")
    ] = None,
    seasonality: Annotated[
        str | None, typer.Option(help="auto, none, daily or daily+weekly (default: forecast.seasonality).")
    ] = None,
    low_below: Annotated[
        float | None, typer.Option(help="Low-load windows: upper band under this (default: half the peak).")
    ] = None,
    cap: Annotated[
        float | None, typer.Option("--max", help="Demand cannot exceed this (e.g. the cluster's GPUs: 64).")
    ] = None,
    svg: Annotated[
        Path | None, typer.Option(help="Also write the forecast as an SVG bar chart, hour by hour.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Forecast GPU demand for the next hours, with its prediction band and low-load windows.

    From a CSV (--trace, e.g. the Helios month) or from the configured source's history (a pool's
    demand: its GPUs' utilisation summed). The model is Holt-Winters with daily and weekly
    seasonality (MSTL + damped-trend exponential smoothing); `auto` keeps the seasonality that
    forecast the last two days best. Needs `pip install 'gpusteward[forecast]'`.
    """
    with exit_on_errors():
        settings = load_settings(config)
        f = settings.forecast
        step = (bucket_minutes or f.bucket_minutes) * 60
        season = seasonality or f.seasonality
        if season not in ("auto", "none", "daily", "daily+weekly"):
            fail(f"--seasonality must be auto, none, daily or daily+weekly, not {season!r}")
        if trace is not None:
            table = load_demand_csv(trace, column)
            times, values = table.times_s, table.values
            if until is not None:
                try:
                    cut = parse_time(until)
                except ValueError:
                    fail(f"--until: not RFC 3339 or epoch seconds: {until!r}")
                keep = times < cut
                times, values = times[keep], values[keep]
            series, what = bucket(times, values, step), f"{trace.name}:{table.column}"
        else:
            series = _from_source(settings, source, history_hours, step, pool)
            what = f"pool {pool or 'default'}"
        horizon = max(1, round((horizon_hours or f.horizon_hours) * 3600 / step))
        model = fit(series, seasonality=cast(Seasonality, season), horizon_steps=min(horizon, 8))
        fc = forecast(model, series, horizon, level=f.band_level, simulations=f.simulations, ceiling=cap)
        seen = series.values[-round(7 * 86_400 / step) :]
        peak = max(
            float(fc.upper.max()), float(np.nanpercentile(seen, 95)) if np.isfinite(seen).any() else 0.0
        )
        threshold = low_below if low_below is not None else f.low_load_share * peak
        windows = low_load_windows(fc, threshold, min_minutes=step / 60)
        if svg is not None:
            svg.write_text(_chart(fc, what), encoding="utf-8")
    result: dict[str, Any] = {
        "series": what,
        "history_buckets": len(series),
        "seasonality": model.seasonality,
        "validation_mae": {k: round(v, 3) for k, v in model.validation_mae.items()},
        "forecast": fc.to_dict(),
        "low_load_threshold": round(threshold, 3),
        "low_load_windows": [w.to_dict() for w in windows],
    }
    if json_out:
        print(json.dumps(result, indent=2))
        return
    _print_forecast(result, fc, windows)


def _chart(fc: Any, what: str) -> str:
    hours = max(1, round(3600 / fc.step_s))
    n = len(fc) // hours
    labels = [utc(fc.start_s + i * 3600).strftime("%H:%M") for i in range(n)]
    mean = [float(fc.mean[i * hours : (i + 1) * hours].mean()) for i in range(n)]
    upper = [float(fc.upper[i * hours : (i + 1) * hours].max()) for i in range(n)]
    return bar_chart(
        labels, {"mean": mean, "upper band": upper}, title=f"Forecast GPU demand: {what}", unit="GPUs"
    )


def _print_forecast(result: dict[str, Any], fc: Any, windows: list[Any]) -> None:
    scores = ", ".join(f"{k} {v}" for k, v in result["validation_mae"].items())
    out.print(
        f"[bold]{result['series']}[/bold]: {result['history_buckets']} buckets of history, "
        f"seasonality [bold]{result['seasonality']}[/bold]"
        + (f" (validation MAE: {scores})" if scores else ""),
        highlight=False,
    )
    t = Table("time (UTC)", "mean", f"{100 * fc.level:.0f}% band")
    for i, at in enumerate(fc.times()):
        t.add_row(
            utc(float(at)).strftime("%a %H:%M"), f"{fc.mean[i]:.1f}", f"{fc.lower[i]:.1f} – {fc.upper[i]:.1f}"
        )
    out.print(t)
    if not windows:
        out.print(f"No low-load window (upper band under {result['low_load_threshold']:.1f}) ahead.")
    for w in windows:
        out.print(
            f"Low load {utc(w.start_s):%a %H:%M} – {utc(w.end_s):%H:%M} UTC ({w.minutes:.0f} min): "
            f"at most {w.peak_upper:.1f} GPUs",
            highlight=False,
        )


def advise_command(
    config: ConfigOpt = None,
    source: Annotated[
        str | None, typer.Option("--source", "-s", help="Override the configured source.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Right-sizing advice and anomalies for the workloads running now (one dry-run tick).

    Over-provisioned (GPUs requested vs used, from the window's history: raise
    store.window_minutes to judge longer lives), GPU too large (a MIG slice or a smaller GPU),
    input-bound (data-loader advice), the rule pack's advice, and anomalies (needs scikit-learn).
    Advice reaches owners as notices and reports; gpusteward never acts on it.
    """
    with exit_on_errors():
        settings = load_settings(config, mode="dry-run")
        settings.insights.enabled = True  # asked for by name, whatever the config says
        steward, _ = build_steward(settings, source_name=source)
        report = steward.tick()
    advice = [f for f in report.findings if f.action is RuleAction.ADVISE]
    hook = steward.insights
    notes = list(hook.notes) if isinstance(hook, Insights) else []
    if json_out:
        rows = [
            {
                "workload": f.workload_id,
                "rule": f.rule,
                "kind": f.kind,
                "gpus": list(f.gpu_uuids),
                "advice": f.message,
            }
            for f in advice
        ]
        print(json.dumps({"at": report.at.isoformat(), "advice": rows, "notes": notes}, indent=2))
        return
    for n in notes:
        out.print(f"[yellow]note:[/yellow] {n}", highlight=False)
    if not advice:
        out.print(f"No advice for the {report.workloads} running workloads.")
        return
    t = Table("workload", "kind", "advice")
    for f in advice:
        t.add_row(f.workload_id or "-", f.kind, f.message)
    out.print(t)
