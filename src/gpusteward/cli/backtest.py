"""``gpusteward backtest``: what the policy would have done over a history, and what it would have saved."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, cast, get_args

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpusteward.cli import output
from gpusteward.cli.exits import err, exit_on_errors, fail
from gpusteward.cli.sweep import sweep_command
from gpusteward.domain.models import utc
from gpusteward.integrations.replay import Trace, TraceFormat, load_trace
from gpusteward.integrations.replay.generic import parse_time
from gpusteward.integrations.replay.pods import PodList, load_pod_list
from gpusteward.integrations.replay.trace import time_problem
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.scenarios.backtest import (
    ACTION_COLUMNS,
    BacktestResult,
    action_rows,
    history_trace,
    policy_settings,
    run_backtest,
)
from gpusteward.scenarios.backtest_queue import queue_line
from gpusteward.scenarios.scoring import Scoring

out = output.console()

#: The rows of the comparison table: (summary key, label).
ROWS = (
    ("hours", "hours of history"),
    ("gpus", "GPUs"),
    ("workloads", "workloads"),
    ("waste_gpu_hours", "waste in the trace (GPU-h under 10 %)"),
    ("flagged_waste_gpu_hours", "waste the rules flagged (GPU-h)"),
    ("reclaimed_gpu_hours", "reclaimed (GPU-h)"),
    ("cost_saved", "saved"),
    ("stops", "workloads stopped"),
    ("regrets", "regrets (false kills)"),
    ("lenient_regrets", "lenient regrets (busy >= 10 % for 5 min)"),
    ("oracle_gpu_hours", "hindsight oracle (GPU-h)"),
    ("detection_latency_p50_min", "detection latency p50 (min)"),
    ("stop_latency_p50_min", "idle-to-stop p50 (min)"),
    ("notices", "notices"),
)


def _when(value: str, option: str) -> datetime:
    try:
        t = parse_time(value)
    except (ValueError, OverflowError):
        t = None
    if t is None:
        fail(f"{option}: not epoch seconds or RFC 3339: {value!r}")
    if problem := time_problem(t):
        fail(f"{option}: {problem}")
    return utc(t)


def _trace(
    settings: Settings,
    source: str,
    trace: Path | None,
    fmt: str | None,
    gpu_model: str | None,
    start: str | None,
    end: str | None,
    tick_seconds: float | None,
) -> Trace:
    cfg = settings.source.replay
    if source == "replay":
        if start is not None or end is not None:
            fail("--from and --to read other sources back; a replay plays its whole trace")
        path = trace or cfg.trace
        if path is None:
            fail("--trace FILE (or source.replay.trace in the config) is needed to replay a trace")
        kind = cast(TraceFormat, fmt) if fmt is not None else cfg.format
        return load_trace(path, kind, gpu_model=cfg.gpu_model if gpu_model is None else gpu_model)
    if start is None or end is None:
        fail(f"--from and --to are needed to backtest the {source} source over its history")
    step = tick_seconds or settings.tick_seconds
    return history_trace(settings, source, _when(start, "--from"), _when(end, "--to"), step)


def _pods(settings: Settings, path: Path | None, scale: float | None) -> PodList | None:
    cfg = settings.source.replay
    path = path or cfg.queue
    if path is None:
        if scale is not None:
            fail("--queue-scale goes with --queue (or source.replay.queue)")
        return None
    pods = load_pod_list(path, scale=cfg.queue_scale if scale is None else scale)
    if pods.skipped:
        left = ", ".join(f"{n} {why.replace('_', ' ')}" for why, n in pods.skipped.items())
        err.print(f"{path}: {len(pods.jobs)} jobs of {pods.rows} rows ({left} left out)", highlight=False)
    return pods


def _horizon_s(value: str) -> float:
    """``6h``, ``90m``, ``3600s`` or plain seconds."""
    text = value.strip().lower()
    unit = {"h": 3600.0, "m": 60.0, "s": 1.0}.get(text[-1:])
    try:
        seconds = float(text[:-1]) * unit if unit is not None else float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        fail(f"--horizon: a positive duration such as 6h or 90m, not {value!r}")
    return seconds


def _policies(settings: Settings, files: Sequence[Path]) -> list[tuple[str, Settings]]:
    if not files:
        return [("configured", settings)]
    out_: list[tuple[str, Settings]] = []
    for f in files:
        name = f.stem
        while name in {n for n, _ in out_}:
            name += "'"
        out_.append((name, policy_settings(settings, f)))
    return out_


def _state_url(state: Path | None, name: str, several: bool) -> str | None:
    if state is None:
        return None
    path = state.with_name(f"{state.stem}-{name}{state.suffix}") if several else state
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path.resolve()}"


@contextmanager
def _progress(*, disable: bool) -> Iterator[Callable[[str], Callable[[float], None]]]:
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=disable,
        transient=True,
    )

    def task(name: str) -> Callable[[float], None]:
        tid = progress.add_task(f"backtest {name}", total=1.0)
        return lambda done: progress.update(tid, completed=done)

    with progress:
        yield task


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}".rstrip("0").rstrip(".") if value % 1 else f"{value:,.0f}"
    return str(value)


def print_table(console: Console, results: Sequence[BacktestResult]) -> None:
    first = results[0].summary
    table = Table(title=f"backtest of {first['trace']} ({first['currency']}, {first['rate']} rate)")
    table.add_column("")
    for r in results:
        table.add_column(r.policy, justify="right")
    for key, label in ROWS:
        table.add_row(
            label + (f" ({first['currency']})" if key == "cost_saved" else ""),
            *(_cell(r.summary[key]) for r in results),
        )
    for level in ("L1", "L2", "L3", "L4"):
        table.add_row(
            f"actions {level}", *(str(r.summary["actions_by_level"].get(level, 0)) for r in results)
        )
    console.print(table)
    for r in results:
        if line := queue_line(r.summary):
            console.print(f"{r.policy}: {line}", highlight=False)
    for r in results:
        if r.summary["regret_workloads"]:
            shown = ", ".join(r.summary["regret_workloads"][:10])
            console.print(
                f"{r.policy}: regrets on {shown}" + (" …" if r.summary["regrets"] > 10 else ""),
                highlight=False,
            )


def write_actions_csv(path: Path, results: Sequence[BacktestResult]) -> int:
    several = len(results) > 1
    columns = [*ACTION_COLUMNS, *(["policy"] if several else [])]
    n = 0
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in results:
            for row in action_rows(r):
                writer.writerow({**row, **({"policy": r.policy} if several else {})})
                n += 1
    return n


def backtest(
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            "-t",
            help="Trace file to replay (CSV/Parquet long table, Philly windows, Helios sequence).",
        ),
    ] = None,
    source: Annotated[
        str,
        typer.Option(
            "--source",
            "-s",
            help="replay (a trace file), or a source to read back over --from/--to (e.g. prometheus).",
        ),
    ] = "replay",
    start: Annotated[
        str | None,
        typer.Option(
            "--from", help="Start of the history (RFC 3339 or epoch seconds), for sources other than replay."
        ),
    ] = None,
    end: Annotated[
        str | None, typer.Option("--to", help="End of the history, for sources other than replay.")
    ] = None,
    policy: Annotated[
        list[Path] | None,
        typer.Option(
            "--policy",
            "-p",
            help="Policy file (rules, policy, analysis, store.window_minutes); repeat to compare "
            "side by side.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Config file: prices, the source, the default policy."),
    ] = None,
    fmt: Annotated[
        str | None, typer.Option("--format", help="Trace format: auto, generic, philly, helios.")
    ] = None,
    gpu_model: Annotated[
        str | None, typer.Option(help="GPU model for traces that name none (prices the GPU-hours).")
    ] = None,
    tick_seconds: Annotated[
        float | None,
        typer.Option(
            min=1, max=86400, help="Simulated seconds per tick (default: the trace's sampling interval)."
        ),
    ] = None,
    state: Annotated[
        Path | None,
        typer.Option(
            help="Keep the backtest's state and ledger in this SQLite file (for `gpusteward report "
            "--db`); with several policies, one file each, named FILE-POLICY."
        ),
    ] = None,
    actions_csv: Annotated[
        Path | None,
        typer.Option(
            "--actions-csv",
            help="Write every simulated action: time, workload, gpu, level, rule (then step, status).",
        ),
    ] = None,
    json_out: Annotated[
        bool,
        typer.Option("--json", help='Print one JSON object (with several policies: {"policies": [...]}).'),
    ] = False,
    busy_pct: Annotated[
        float,
        typer.Option(
            "--busy-pct", min=0.0, max=100.0, help="A sample at this utilisation (%) or more is busy."
        ),
    ] = 1.0,
    busy_samples: Annotated[
        int,
        typer.Option(
            "--busy-samples",
            min=1,
            help="Busy samples within --horizon after a stop that make it a false kill.",
        ),
    ] = 10,
    horizon: Annotated[
        str, typer.Option("--horizon", help="How far after a stop to look for busy samples (6h, 90m).")
    ] = "6h",
    queue: Annotated[
        Path | None,
        typer.Option(
            "--queue",
            help="Pod list of arriving jobs (Alibaba openb_pod_list format; default "
            "source.replay.queue): they wait for the trace's GPUs, demand paces the ladder, and the "
            "result reports queue times with and without gpusteward.",
        ),
    ] = None,
    queue_scale: Annotated[
        float | None,
        typer.Option(
            "--queue-scale",
            help="Multiply the pod list's arrival times, not run times: 0.25 fits four days of pods "
            "into one day of replay (default source.replay.queue_scale, 1).",
        ),
    ] = None,
    sweep: Annotated[
        Path | None,
        typer.Option(
            "--sweep",
            help="A grid of policy parameters (YAML: rules, grid, policies): backtest every point "
            "and print the frontier of false kills against reclaimed GPU-hours.",
        ),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", min=1, max=512, help="Sweep processes (default: the cores).")
    ] = None,
    svg: Annotated[
        Path | None, typer.Option("--svg", help="With --sweep: write the frontier chart (SVG) here.")
    ] = None,
) -> None:
    """Replay a history through the policy, enforcing against a simulated cluster, and judge it.

    Reports the waste in the history, the GPU-hours and money the stops would have reclaimed,
    actions by level, and regrets: stops of workloads the trace shows busy again afterwards
    (at least --busy-samples samples at --busy-pct or more within --horizon), the false kills
    the policy would have made. Nothing real is touched.
    """
    scoring = Scoring(busy_pct=busy_pct, busy_samples=busy_samples, horizon_s=_horizon_s(horizon))
    with exit_on_errors():
        settings = load_settings(config)
        if fmt is not None and fmt not in get_args(TraceFormat):
            fail(f"--format must be one of {', '.join(get_args(TraceFormat))}, not {fmt!r}")
        history = _trace(settings, source, trace, fmt, gpu_model, start, end, tick_seconds)
        policies = _policies(settings, policy or [])
        pods = _pods(settings, queue, queue_scale)
        if sweep is not None:
            if pods is not None:
                fail("--queue goes with a plain backtest, not --sweep")
            if len(policies) > 1 or state is not None or actions_csv is not None:
                fail("--sweep takes at most one --policy (its base), and no --state or --actions-csv")
            sweep_command(
                out,
                history,
                policies[0][1],
                sweep,
                jobs=jobs,
                scoring=scoring,
                tick_s=tick_seconds,
                json_out=json_out,
                svg=svg,
            )
            return
        if svg is not None or jobs is not None:
            fail("--svg and --jobs go with --sweep")
        results = []
        with _progress(disable=json_out) as task:
            for name, cfg in policies:
                url = _state_url(state, name, len(policies) > 1)
                results.append(
                    run_backtest(
                        history,
                        cfg,
                        policy=name,
                        tick_s=tick_seconds,
                        state_url=url,
                        on_tick=task(name),
                        scoring=scoring,
                        queue=pods,
                    )
                )
    if actions_csv is not None:
        n = write_actions_csv(actions_csv, results)
        err.print(f"{n} action(s) written to {actions_csv}", highlight=False)
    if json_out:
        obj: Any = results[0].summary if len(results) == 1 else {"policies": [r.summary for r in results]}
        print(json.dumps(obj, indent=2, default=str))
        return
    print_table(out, results)
