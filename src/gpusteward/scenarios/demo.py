"""The demo: the whole loop on the simulated cluster, scored against its ground truth."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gpusteward.domain.cloud import INTERRUPTION_CHECKPOINT_STEP, STOP_INSTANCE_STEP
from gpusteward.domain.models import Action, ApprovalStatus, Level
from gpusteward.integrations.sim import DEFAULT_START, SimClock, SimCluster
from gpusteward.integrations.sim.settings import SimSourceSettings
from gpusteward.integrations.sim.shared import LightServices
from gpusteward.integrations.sim.spot import SimInterruptions
from gpusteward.integrations.sim.truth import EndHow, Score, Truth
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings, SourceSettings, StoreSettings
from gpusteward.runtime.consolidation_step import pack_settings
from gpusteward.scenarios.consolidation import backtest, backtest_summary, plan_summary
from gpusteward.scenarios.demo_figures import cloud_figures, counterfactual, health_figures, queue_figures
from gpusteward.store.db import StateStore

#: A workload wasteful for at least this long inside the period must have been stopped:
#: detection (30 min) + ladder to the graceful stop (30 min) + margin.
MISSED_AFTER = timedelta(minutes=90)


@dataclass
class DemoResult:
    """The demo's outcome: the agent's record and the simulator's score of it."""

    gpus: int
    hours: float
    workloads: int
    currency: str
    price_per_gpu_hour: float
    findings: list[dict[str, Any]]
    actions_by_level: dict[str, int]
    stops: list[Action]
    score: Score
    truths: tuple[Truth, ...]
    missed_workloads: list[str]
    protected_untouched: bool
    notices: int
    #: The light services' consolidation: planned from the first half, replayed on the second.
    consolidation: dict[str, Any] | None = None
    #: Median queue time with gpusteward and without (``demo_figures.queue_figures``).
    queue: dict[str, Any] | None = None
    #: Failed GPUs found and predicted (``demo_figures.health_figures``).
    health: dict[str, Any] | None = None
    #: Cloud instances stopped, spot interruptions checkpointed (``demo_figures.cloud_figures``).
    cloud: dict[str, Any] | None = None
    #: Workloads whose node's instance was taken (a spot interruption), and when.
    interrupted: dict[str, datetime] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        s = self.score
        return {
            "gpus": self.gpus,
            "hours": self.hours,
            "workloads": self.workloads,
            "findings": len(self.findings),
            "findings_by_rule": _count(f["rule"] for f in self.findings),
            "actions_by_level": self.actions_by_level,
            "notices": self.notices,
            "waste_gpu_hours": round(s.waste_gpu_hours, 2),
            "reclaimed_gpu_hours": round(s.reclaimed_gpu_hours, 2),
            "cost_saved": round(s.reclaimed_gpu_hours * self.price_per_gpu_hour, 2),
            "currency": self.currency,
            "false_actions": len(s.false_stops),
            "false_action_workloads": list(s.false_stops),
            "protected_untouched": self.protected_untouched,
            "missed_workloads": self.missed_workloads,
            "queue_time_p50_min": self.queue,
            **(self.health or {}),
            **(self.cloud or {}),
            "consolidation": self.consolidation,
        }


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return dict(sorted(out.items()))


def run_demo(
    *,
    hours: float = 24.0,
    nodes: int = 8,
    gpus_per_node: int = 8,
    seed: int = 42,
    tick_seconds: float = 60.0,
    settings: Settings | None = None,
    on_tick: Callable[[int], None] | None = None,
    state_dir: Path | None = None,
    cloud_nodes: bool = True,
) -> DemoResult:
    """Simulate ``hours`` of a cluster with gpusteward in enforce mode against the simulator;
    with ``cloud_nodes``, its nodes run on simulated cloud instances, some spot (interrupted)."""
    with tempfile.TemporaryDirectory(prefix="gpusteward-demo-") as tmp:
        folder = state_dir or Path(tmp)
        base = settings or Settings()
        settings = base.model_copy(
            update={
                "mode": "enforce",
                "tick_seconds": tick_seconds,
                "source": SourceSettings(
                    name="sim",
                    sim=SimSourceSettings(
                        nodes=nodes,
                        gpus_per_node=gpus_per_node,
                        seed=seed,
                        history_hours=0,
                        cloud_nodes=cloud_nodes,
                    ),
                ),
                "store": StoreSettings(url=f"sqlite:///{folder / 'demo.db'}"),
                "cloud": _with_instance_stops(base) if cloud_nodes else base.cloud,
            }
        )
        clock = SimClock(DEFAULT_START)
        notifier = MemoryNotifier()
        steward, integration = build_steward(settings, clock=clock, notifier=notifier)
        store = steward.store
        assert isinstance(store, StateStore)  # built from store.url
        cluster = integration.ground_truth
        assert isinstance(cluster, SimCluster), "the demo runs on the sim integration"
        total = max(1, int(hours * 3600 / tick_seconds))
        for i in range(total):
            steward.tick()
            clock.advance(tick_seconds)
            if cloud_nodes:
                _approve_instance_stops(store, clock.now())
            if on_tick is not None:
                on_tick(i + 1)
        steward.settle()
        watch = integration.interruptions
        spot = watch if isinstance(watch, SimInterruptions) else None
        other, other_spot = counterfactual(cluster, spot)
        result = _score(store, cluster, settings, hours, clock.now(), other)
        result.cloud = cloud_figures(integration, clock.now(), other_spot)
        result.notices = len(notifier.sent)
        result.consolidation = consolidation(settings, hours, seed)
        store.close()
        return result


def _with_instance_stops(base: Settings) -> Any:
    """The cloud section with L4 instance stops on, at their default idle time, reserve and
    lifecycles (on-demand only): the demo's nodes run on the simulator's instances."""
    return base.cloud.model_copy(
        update={"instances": base.cloud.instances.model_copy(update={"enabled": True})}
    )


def _approve_instance_stops(store: StateStore, at: datetime) -> None:
    """The on-call admin of the demo: approves every instance stop asked for (L4 waits for an
    approval by default), and nothing else."""
    for request in store.approvals(ApprovalStatus.PENDING):
        if request.step == STOP_INSTANCE_STEP:
            store.decide_approval(request.id, approve=True, by="demo-admin", reason="idle node", at=at)


def _score(
    store: StateStore,
    cluster: SimCluster,
    settings: Settings,
    hours: float,
    until: Any,
    other: SimCluster | None = None,
) -> DemoResult:
    score = cluster.score(until)
    actions = store.actions(limit=1_000_000)
    # An interruption's checkpoint signal stops nothing (the cloud takes the node anyway).
    stops = [a for a in actions if a.level >= Level.GRACEFUL_STOP and a.step != INTERRUPTION_CHECKPOINT_STEP]
    stopped = {a.workload_id for a in stops}
    truths = cluster.truths()
    # A workload whose node was taken (a spot interruption) lived only until then.
    taken = {e.workload_id: e.at for e in cluster.endings() if e.how is EndHow.INTERRUPTED}
    missed = sorted(
        t.workload_id
        for t in truths
        if t.wasteful_from is not None
        and not t.protected
        and t.workload_id not in stopped
        and min(until, t.planned_end, taken.get(t.workload_id, until)) - t.wasteful_from >= MISSED_AFTER
    )
    protected = {t.workload_id for t in truths if t.protected}
    price = settings.cost.price_for(cluster.gpus[0].model)
    episodes = store.all_findings()
    return DemoResult(
        gpus=len(cluster.gpus),
        hours=hours,
        workloads=len(truths),
        currency=settings.cost.currency,
        price_per_gpu_hour=price,
        findings=[e.to_dict() for e in episodes],
        actions_by_level=_count(a.level.label for a in actions),
        stops=sorted(stops, key=lambda a: a.created_at),
        score=score,
        truths=truths,
        missed_workloads=missed,
        protected_untouched=not (protected & stopped) and not score.protected_stops,
        notices=0,
        queue=queue_figures(cluster, until, other),
        health=health_figures(cluster, episodes, until),
        interrupted=taken,
    )


def consolidation(settings: Settings, hours: float, seed: int) -> dict[str, Any]:
    """The simulator's light services (integrations/sim/shared.py, on whole GPUs apart from the
    scored cluster): planned by the tick's planner from the first half of the run, replayed on
    the second half (contention, memory violations), with the naive first-fit beside it."""
    usage, items = LightServices(DEFAULT_START, hours=hours, seed=seed).usage()
    cfg = pack_settings(settings.consolidation)
    bt = backtest(usage, items, cfg, plan_hours=hours / 2)
    plan = plan_summary(bt.plan, items, settings.cost, cfg)
    return {
        **backtest_summary(bt),
        "gpus_freed": plan["gpus_freed"],
        "money_per_month": plan["money_per_month"],
        "currency": plan["currency"],
        "by_team": plan["by_team"],
        "groups": plan["groups"],
    }
