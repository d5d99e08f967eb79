"""gpusteward's own metrics for ``/metrics``, updated from each ``TickReport``.

Every metric lives in the registry of one ``StewardMetrics`` (nothing global at import),
so tests and several stewards in one process never share counters. ``record`` runs on
the loop thread; the HTTP server only renders the registry. (Per-GPU readings are the
node exporter's job: ``gpusteward exporter``.)
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gpusteward.analysis.queue_figures import queue_figures
from gpusteward.domain.health import Health
from gpusteward.domain.models import ActionStatus, Gpu, Level, RuleAction
from gpusteward.domain.queue import Queue
from gpusteward.runtime.loop import Steward
from gpusteward.runtime.tick_report import TickReport

TICK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class StewardMetrics:
    """The metric set of one steward, in its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, labels, registry=r)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, registry=r)

        self.source_up = gauge(
            "gpusteward_source_up",
            "1 when the last tick observed the source; 0 when down or backing off.",
            ("source",),
        )
        self.findings = gauge("gpusteward_findings", "Findings of the last tick, by kind.", ("kind",))
        self.idle_gpus = gauge("gpusteward_idle_gpus", "GPUs in a reclaim finding (zombie, idle, stalled).")
        self.waste = gauge(
            "gpusteward_waste_cost_per_hour", "What the idle GPUs cost per hour (price table)."
        )
        self.gpus = gauge("gpusteward_gpus", "GPUs known to the steward.")
        self.stale_gpus = gauge("gpusteward_stale_gpus", "Held GPUs without fresh data (never acted on).")
        self.workloads = gauge("gpusteward_workloads", "Workloads holding GPUs at the last tick.")
        self.actions = counter(
            "gpusteward_actions", "Actions by ladder step, level and result (dry-run included).",
            ("action", "level", "result"),
        )  # fmt: skip
        self.saved = counter(
            "gpusteward_saved_cost",
            "Hourly cost of GPUs freed by successful stops, accrued while they stay free.",
        )
        self.tick_duration = Histogram(
            "gpusteward_tick_duration_seconds", "Wall time of one tick.", buckets=TICK_BUCKETS, registry=r
        )
        self.paused = gauge("gpusteward_paused", "1 while the global kill switch is on.")
        self.dry_run = gauge("gpusteward_dry_run", "1 when actions are only recorded, not carried out.")
        self.tick_errors = gauge("gpusteward_tick_errors", "Problems reported by the last tick.")
        self.alerts = counter(
            "gpusteward_alerts_received", "Alertmanager alerts received, by status.", ("status",)
        )
        self.false_kills = counter(
            "gpusteward_false_kills",
            "Suspected false kills found (a stop its owner resubmitted, restored or appealed within "
            "the horizon), by rule and scope; dismissed ones stay counted.",
            ("rule", "scope"),
        )
        self.reclaim_attempts = gauge(
            "gpusteward_reclaim_attempts", "L2+ action attempts that ended, per executor.", ("executor",)
        )
        self.reclaim_success = gauge(
            "gpusteward_reclaim_success_ratio",
            "Share of L2+ action attempts that freed their GPUs (verified), per executor.",
            ("executor",),
        )
        self.gpu_health = gauge(
            "gpusteward_gpu_health",
            "GPUs per health state (GPUs without health data not counted).",
            ("state",),
        )
        self.jobs_waiting = gauge(
            "gpusteward_jobs_waiting", "Jobs waiting in the scheduler, per queue.", ("queue",)
        )
        self.gpus_waited_for = gauge(
            "gpusteward_gpus_waited_for",
            'GPUs asked for by jobs waiting on free GPUs, per queue and model ("any": no model asked).',
            ("queue", "model"),
        )
        self.queue_time = gauge(
            "gpusteward_queue_time_seconds",
            "Queue time (start - submit) of recently started jobs, per queue.",
            ("queue", "quantile"),
        )
        # The queue series set last tick, so those of queues that emptied are removed, not left stale.
        self._queue_series: dict[Gauge, set[tuple[str, ...]]] = {}
        self._counted_false_kills = 0
        self._kinds: set[str] = set()
        self._freed: dict[str, tuple[float, str]] = {}
        self._last_at: datetime | None = None

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def record(self, steward: Steward, report: TickReport, seconds: float) -> None:
        """Update every metric from one tick (call on the loop thread)."""
        gpus: Mapping[str, Gpu] = steward.gpus
        self.source_up.labels(steward.source.name).set(1 if report.source_ok else 0)
        kinds = Tally(f.kind for f in report.findings)
        self._kinds |= set(kinds)
        for kind in self._kinds:
            self.findings.labels(kind).set(kinds.get(kind, 0))
        idle = {u for f in report.findings if f.action is RuleAction.RECLAIM for u in f.gpu_uuids}
        self.idle_gpus.set(len(idle))
        self.waste.set(sum(gpus[u].price_per_hour for u in idle if u in gpus))
        self.gpus.set(report.gpus)
        self.stale_gpus.set(report.stale_gpus)
        self.workloads.set(report.workloads)
        self.paused.set(1 if report.paused else 0)
        self.dry_run.set(1 if steward.dry_run else 0)
        self.tick_errors.set(len(report.errors))
        self.tick_duration.observe(max(0.0, seconds))
        for a in report.actions:
            d = a.decision
            self.actions.labels(d.step or "-", d.level.label, a.status.value).inc()
        self._accrue_savings(steward, report)
        self._health(report)
        self._queue(report.queue)
        if steward.rollout is not None and report.leader:
            self._safety(steward)

    def _health(self, report: TickReport) -> None:
        states = Tally(report.health.values())
        for state in Health:
            self.gpu_health.labels(state.value).set(states.get(state, 0))

    def _queue(self, queue: Queue | None) -> None:
        """The queue gauges; with no queue read this tick, none at all (unknown is not zero)."""
        now: dict[Gauge, dict[tuple[str, ...], float]] = {
            self.jobs_waiting: {},
            self.gpus_waited_for: {},
            self.queue_time: {},
        }
        if queue is not None:
            fig = queue_figures(queue)
            for name, waiting in fig.by_queue.items():
                now[self.jobs_waiting][(name,)] = waiting.jobs
                mine = Queue(queue.at, tuple(p for p in queue.pending if p.queue == name))
                for model, w in queue_figures(mine).by_model.items():
                    now[self.gpus_waited_for][(name, model or "any")] = w.gpus
            for name, t in fig.time_by_queue.items():
                if t.p50_s is not None and t.p95_s is not None:
                    now[self.queue_time][(name, "0.5")] = t.p50_s
                    now[self.queue_time][(name, "0.95")] = t.p95_s
        for g, values in now.items():
            for gone in self._queue_series.get(g, set()) - set(values):
                g.remove(*gone)
            for labels, v in values.items():
                g.labels(*labels).set(v)
            self._queue_series[g] = set(values)

    def _safety(self, steward: Steward) -> None:
        """The live safety figures from the leader's record (which survives restarts)."""
        assert steward.rollout is not None
        watch = steward.rollout.book.watch()
        for f in watch.false_kills:
            if f.id > self._counted_false_kills:
                self.false_kills.labels(f.rule, f.scope).inc()
                self._counted_false_kills = f.id
        for executor, (attempted, freed) in watch.reclaim.items():
            self.reclaim_attempts.labels(executor).set(attempted)
            self.reclaim_success.labels(executor).set(freed / attempted if attempted else 0.0)

    def _accrue_savings(self, steward: Steward, report: TickReport) -> None:
        """A stopped workload's GPUs save their price from when it lets go of them until
        another workload takes them."""
        holder = {u: w.id for w in steward.workloads.values() for u in w.gpu_uuids}
        if self._last_at is not None:
            hours = max(0.0, (report.at - self._last_at).total_seconds() / 3600)
            for uuid, (price, stopped) in list(self._freed.items()):
                now_held_by = holder.get(uuid)
                if now_held_by is None:
                    self.saved.inc(price * hours)
                elif now_held_by != stopped:
                    del self._freed[uuid]
        self._last_at = report.at
        if steward.dry_run:
            return
        for a in report.actions:
            if a.status is ActionStatus.SUCCEEDED and a.decision.level >= Level.GRACEFUL_STOP:
                for uuid in a.decision.gpu_uuids:
                    gpu = steward.gpus.get(uuid)
                    self._freed[uuid] = (gpu.price_per_hour if gpu else 0.0, a.decision.workload_id)
