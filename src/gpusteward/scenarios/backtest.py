"""Backtest: the configured policy over a trace's history, enforcing against the replay.

The very loop the agent runs (``build_steward`` → ``Steward.tick``) steps through the trace on
a ``SimClock``; a stop releases the workload in the replay (its samples are gone from then on).
Each stop is then judged against what the trace shows happened next (``scoring.py``):

* a **regret** (false kill) is a stop (L2+) of a workload the trace shows busy again: by
  default at least 10 samples at 1 % or more within 6 hours after the stop;
* a **lenient regret** is the older, looser count: busy at 10 % for 5 minutes after the stop;
* **reclaimed** GPU-hours run from the stop to the workload's last sample, for stops that are
  not regrets; a workload counts once, at its first stop;
* **waste** is what the trace shows, whatever the policy: GPU-hours held under 10 % utilisation;
* **detection latency** runs from when all of a workload's GPUs went idle (in the trace) to the
  first reclaim finding on it.
"""

from __future__ import annotations

import math
import statistics
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.integration import Integration
from gpusteward.domain.models import Action, Notice, RuleAction, Workload, utc
from gpusteward.domain.ports import SystemClock
from gpusteward.domain.yamlload import load_yaml
from gpusteward.integrations.replay import BUSY_PCT, ReplayExecutor, ReplaySource, Stop, Trace
from gpusteward.integrations.replay.observed import trace_from_observations
from gpusteward.integrations.replay.pods import PodList
from gpusteward.integrations.replay.queue_model import QueueModel
from gpusteward.integrations.sim import SimClock
from gpusteward.runtime import collector
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.runtime.ledger_recorder import LedgerRecorder
from gpusteward.runtime.registry import build_integration
from gpusteward.scenarios.backtest_queue import queue_figures
from gpusteward.scenarios.scoring import DEFAULT_SCORING, Scorer, Scoring
from gpusteward.store.db import StateStore
from gpusteward.store.ledger import LedgerStore

#: The lenient count: a stopped workload busy again (>= 10 %) for this long.
REGRET_BUSY_S = 300.0
#: Columns of ``--actions-csv``: the first five are the contract, the rest context.
ACTION_COLUMNS = ("time", "workload", "gpu", "level", "rule", "step", "status")
#: Sections a ``--policy`` file may set; the rest (prices, source) comes from the config.
POLICY_SECTIONS = ("rules", "policy", "analysis", "store")


class CountingNotifier:
    """Implements ``Notifier``: a backtest tells nobody, it counts."""

    def __init__(self) -> None:
        self.sent = 0

    def send(self, notice: Notice) -> None:
        self.sent += 1


@dataclass(frozen=True, slots=True)
class JudgedStop:
    stop: Stop
    #: Trace time the workload was busy again at 10 % for 5 min (a lenient regret), else None.
    busy_again_t: float | None
    #: The workload's last sample in the trace.
    end_t: float
    reclaimed_gpu_hours: float
    #: Minutes from when all its GPUs went idle to the stop.
    latency_min: float
    #: Busy samples within the scoring horizon after the stop.
    busy_after: int = 0
    #: A false kill under the scoring contract.
    regret: bool = False

    @property
    def lenient_regret(self) -> bool:
        return self.busy_again_t is not None


@dataclass
class BacktestResult:
    policy: str
    summary: dict[str, Any]
    actions: list[Action] = field(default_factory=list)
    stops: list[JudgedStop] = field(default_factory=list)


def _p50(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 1) if xs else None


def policy_settings(base: Settings, path: Path) -> Settings:
    """``base`` with the rules, policy, analysis and store window of the policy file at ``path``."""
    doc = load_yaml(path).data or {}
    if not isinstance(doc, dict):
        raise ConfigError("a policy file is a mapping of sections", path=str(path), line=1)
    extra = sorted(set(doc) - set(POLICY_SECTIONS))
    if extra:
        raise ConfigError(
            f"{', '.join(extra)}: a policy file sets only {', '.join(POLICY_SECTIONS)} "
            "(prices and the source come from --config)",
            path=str(path),
            line=load_yaml(path).line_of((extra[0],)),
        )
    own = load_settings(path)
    update: dict[str, Any] = {k: getattr(own, k) for k in ("rules", "policy", "analysis") if k in doc}
    if "store" in doc:
        update["store"] = base.store.model_copy(update={"window_minutes": own.store.window_minutes})
    return base.model_copy(update=update)


def backtest_settings(base: Settings, tick_s: float, state_url: str) -> Settings:
    """Enforce at ``tick_s`` into ``state_url``; data counts as fresh for two ticks at least."""
    stale = max(base.analysis.stale_after_seconds, 2 * tick_s)
    return base.model_copy(
        update={
            "mode": "enforce",
            "tick_seconds": tick_s,
            "store": base.store.model_copy(update={"url": state_url}),
            "analysis": base.analysis.model_copy(update={"stale_after_seconds": stale}),
        }
    )


@contextmanager
def _state(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    with tempfile.TemporaryDirectory(prefix="gpusteward-backtest-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'backtest.db'}"


def run_backtest(
    trace: Trace,
    settings: Settings,
    *,
    policy: str = "configured",
    tick_s: float | None = None,
    state_url: str | None = None,
    on_tick: Callable[[float], None] | None = None,
    scoring: Scoring = DEFAULT_SCORING,
    queue: PodList | None = None,
) -> BacktestResult:
    """Run ``settings``' policy over ``trace`` in enforce mode against the replay.

    ``tick_s`` defaults to the trace's sampling interval; ``state_url`` keeps the state and
    ledger (a temporary SQLite file otherwise); ``on_tick(share_done)`` reports progress;
    ``scoring`` says what makes a stop a false kill; ``queue`` (a pod list) gives the replay a
    scheduler whose queue the tick reads, and the summary its queue times (``backtest_queue``).
    """
    tick = float(tick_s or max(1.0, trace.interval_s))
    with _state(state_url) as url:
        cfg = backtest_settings(settings, tick, url)
        trace = trace.with_gpus(cfg.cost.with_prices(trace.gpus))
        source = ReplaySource(trace, lookback_s=tick, default_class=cfg.source.replay.default_class)
        executor = ReplayExecutor(source)
        store = StateStore(url)
        try:
            store.create_schema()
            model = None
            if queue is not None:
                model = QueueModel(trace, queue.jobs, source.released_at, source_name=source.name)
            with collector.settled():  # the trace and the set-up frozen: runtime/collector.py
                result = _run(
                    trace, cfg, policy, tick, source, executor, store, on_tick, Scorer(trace, scoring), model
                )
            if model is not None and queue is not None:
                result.summary.update(queue_figures(model, queue))
            return result
        finally:
            store.close()


def _run(
    trace: Trace,
    cfg: Settings,
    policy: str,
    tick: float,
    source: ReplaySource,
    executor: ReplayExecutor,
    store: StateStore,
    on_tick: Callable[[float], None] | None,
    scorer: Scorer,
    queue: QueueModel | None = None,
) -> BacktestResult:
    index = {w.id: i for i, w in enumerate(trace.workloads)}
    busy_cache: dict[tuple[int, float], float | None] = {}

    def busy_again(i: int, at: float) -> float | None:
        if (i, at) not in busy_cache:
            busy_cache[(i, at)] = trace.busy_again_after(i, at, min_s=REGRET_BUSY_S)
        return busy_cache[(i, at)]

    def savings_end(w: Workload, at: datetime) -> datetime | None:
        i = source.index_of(w)
        t = source.trace_time(at)
        if i is None or scorer.false_kill(i, t):
            return None  # a false kill saves nothing
        return utc(scorer.last_sample(i) + source.offset_s)

    clock = SimClock(utc(trace.start))
    notifier = CountingNotifier()
    integration = Integration(
        name="replay",
        source=source,
        executors=[executor],
        history=source.history,
        queue=None if queue is None else queue.queue,
    )
    steward, _ = build_steward(
        cfg, clock=clock, notifier=notifier, store=store, integration=integration, backfill=False
    )
    # Hourly flushes: the ledger is written as the agent would, without a transaction per tick.
    ledger = steward.ledger = LedgerRecorder(store, cfg.cost, flush_every_s=3600, savings_end=savings_end)
    latencies: list[float] = []
    wasting: set[str] = set()
    t, span = trace.start, max(trace.end - trace.start, 1.0)
    while t <= trace.end:
        clock.set(utc(t))
        report = steward.tick()
        now_wasting = {
            f.workload_id for f in report.findings if f.action is RuleAction.RECLAIM and f.workload_id
        }
        for wid in sorted(now_wasting - wasting):
            if wid in index:
                latencies.append((t - trace.idle_since(index[wid], t)) / 60)
        wasting = now_wasting
        nxt = t + tick
        rows = trace.rows_between(t, nxt)
        if rows.start == rows.stop and not trace.any_running_between(t, nxt):
            # Nothing runs until the next sample: jump there, on the tick grid.
            upcoming = trace.next_time_after(t)
            if upcoming is None:
                break
            nxt = trace.start + math.ceil((upcoming - trace.start) / tick - 1e-9) * tick
        t = nxt
        if on_tick is not None:
            on_tick(min(1.0, (t - trace.start) / span))
    ledger.flush(until=utc(trace.end))
    first: dict[int, Stop] = {}
    for s in executor.stops:
        first.setdefault(s.index, s)  # a workload counts once, at its first stop
    judged = [_judge(trace, scorer, s, busy_again(s.index, s.at_t)) for s in first.values()]
    return BacktestResult(
        policy,
        _summary(trace, cfg, policy, tick, store, judged, latencies, notifier, scorer),
        store.actions(limit=10**9),
        judged,
    )


def _judge(trace: Trace, scorer: Scorer, stop: Stop, busy_t: float | None) -> JudgedStop:
    i, at = stop.index, stop.at_t
    latency = (at - trace.idle_since(i, at)) / 60
    return JudgedStop(
        stop,
        busy_t,
        scorer.last_sample(i),
        scorer.reclaimed_gpu_hours(i, at),
        latency,
        busy_after=scorer.busy_after(i, at),
        regret=scorer.false_kill(i, at),
    )


def _summary(
    trace: Trace,
    cfg: Settings,
    policy: str,
    tick: float,
    store: StateStore,
    judged: list[JudgedStop],
    latencies: list[float],
    notifier: CountingNotifier,
    scorer: Scorer,
) -> dict[str, Any]:
    ledger = LedgerStore(store)
    days = ledger.day_range()
    rows = [] if days is None else ledger.daily(days[0], days[1] + timedelta(days=1))
    regrets = [j for j in judged if j.regret]
    return {
        "policy": policy,
        "trace": trace.name,
        "hours": round((trace.end - trace.start) / 3600, 2),
        "gpus": len(trace.gpus),
        "workloads": len(trace.workloads),
        "held_gpu_hours": round(trace.held_gpu_hours(), 2),
        "waste_gpu_hours": round(trace.idle_gpu_hours(busy_pct=BUSY_PCT), 2),
        "flagged_waste_gpu_hours": round(sum(r.amounts.waste_gpu_hours for r in rows), 2),
        "waste_cost": round(sum(r.amounts.waste_cost for r in rows), 2),
        "reclaimed_gpu_hours": round(sum(j.reclaimed_gpu_hours for j in judged), 2),
        "cost_saved": round(sum(r.amounts.saved_cost for r in rows), 2),
        "currency": cfg.cost.currency,
        "rate": cfg.cost.rate,
        "actions_by_level": store.actions_by_level(dry_run=False),
        "stops": len(judged),
        "regrets": len(regrets),
        "regret_workloads": sorted(j.stop.workload_id for j in regrets),
        "regret_rule": scorer.scoring.describe(),
        "lenient_regrets": sum(j.lenient_regret for j in judged),
        "oracle_gpu_hours": round(scorer.oracle_gpu_hours(), 2),
        "detection_latency_p50_min": _p50(latencies),
        "stop_latency_p50_min": _p50([j.latency_min for j in judged]),
        "notices": notifier.sent,
        "tick_seconds": tick,
        "stale_after_seconds": cfg.analysis.stale_after_seconds,
    }


def action_rows(result: BacktestResult) -> list[dict[str, str]]:
    """Every simulated action, one row each (``ACTION_COLUMNS``); several GPUs are joined by ``;``."""
    return [
        {
            "time": f"{a.created_at.timestamp():.0f}",
            "workload": a.workload_id,
            "gpu": ";".join(a.gpu_uuids),
            "level": a.level.label,
            "rule": a.rule,
            "step": a.step,
            "status": a.status.value,
        }
        for a in result.actions
    ]


def history_trace(
    settings: Settings, source_name: str, start: datetime, end: datetime, step_s: float
) -> Trace:
    """A trace of what ``source_name`` saw from ``start`` to ``end`` (its start-up history, e.g.
    Prometheus range queries), so any source that can look back can be backtested."""
    if end <= start:
        raise ConfigError(f"--to ({end}) must be after --from ({start})")
    integration = build_integration(settings, SystemClock(), source_name)
    try:
        observations = integration.history(start, end, step_s)
    finally:
        integration.source.close()
    return trace_from_observations(
        observations, name=f"{source_name} {start:%Y-%m-%dT%H:%M}..{end:%Y-%m-%dT%H:%M}"
    )
