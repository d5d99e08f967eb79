"""Config → objects. Explicit registries: a source name maps to a factory of (source, executors)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from gpusteward.analysis.rules import CompiledRule, RulePack, compile_rules, default_rule_pack, load_rule_pack
from gpusteward.domain.errors import ConfigError
from gpusteward.domain.models import Observation
from gpusteward.domain.ports import Clock, Notifier, SystemClock
from gpusteward.execution.base import ActionRunner
from gpusteward.notify.throttle import ThrottledNotifier
from gpusteward.policy.owner import check_calendar
from gpusteward.runtime.adapters import Adapters
from gpusteward.runtime.config import Settings
from gpusteward.runtime.insights import build_insights
from gpusteward.runtime.kubernetes_wiring import kubernetes_adapters
from gpusteward.runtime.leadership import build_leadership
from gpusteward.runtime.loop import Steward
from gpusteward.runtime.notify_wiring import build_notifier
from gpusteward.runtime.nvml_wiring import nvml_adapters
from gpusteward.runtime.parking import build_parking
from gpusteward.runtime.prometheus_wiring import prometheus_adapters
from gpusteward.runtime.replay import replay_adapters
from gpusteward.runtime.slurm import slurm_adapters
from gpusteward.sim import SimCluster, SimExecutor, SimSource
from gpusteward.store.db import StateStore
from gpusteward.store.window import WindowStore

log = logging.getLogger(__name__)


def _sim(settings: Settings, clock: Clock) -> Adapters:
    sim = settings.source.sim
    now = clock.now()
    cluster = SimCluster(
        nodes=sim.nodes,
        gpus_per_node=sim.gpus_per_node,
        seed=sim.seed,
        start=now - timedelta(hours=sim.history_hours),
        scenario=sim.scenario,
        drop_rate=sim.drop_rate,
    )
    source = SimSource(cluster)

    def history(start: datetime, end: datetime, step_s: float) -> list[Observation]:
        start = max(start, cluster.start)
        out = []
        t = start
        while t < end:
            out.append(source.observe(t))
            t += timedelta(seconds=step_s)
        return out

    return Adapters(source=source, executors=[SimExecutor(cluster)], history=history, cluster=cluster)


#: Source name → factory of its adapters.
SOURCES: dict[str, Callable[[Settings, Clock], Adapters]] = {
    "sim": _sim,
    "nvml": nvml_adapters,
    "prometheus": prometheus_adapters,
    "slurm": slurm_adapters,
    "kubernetes": kubernetes_adapters,
    "replay": replay_adapters,
}


def load_rules(settings: Settings) -> list[CompiledRule]:
    packs: list[RulePack] = [default_rule_pack()] if settings.rules.use_default_pack else []
    packs.extend(load_rule_pack(Path(f)) for f in settings.rules.files)
    rules = [r for pack in packs for r in pack.rules]
    names = [r.name for r in rules]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"rule names defined twice across rule packs: {', '.join(dupes)}")
    if not rules:
        raise ConfigError("no rules: enable the default pack or list rule files under rules.files")
    return compile_rules(RulePack(rules=rules))


def build_adapters(settings: Settings, clock: Clock, source_name: str | None = None) -> Adapters:
    name = source_name or settings.source.name
    factory = SOURCES.get(name)
    if factory is None:
        known = ", ".join(sorted(SOURCES))
        raise ConfigError(f"unknown source {name!r}; known sources: {known}")
    return factory(settings, clock)


def _source_notifier(adapters: Adapters, notifier: Notifier) -> Notifier:
    return adapters.wrap_notifier(notifier) if adapters.wrap_notifier is not None else notifier


def build_steward(
    settings: Settings,
    *,
    clock: Clock | None = None,
    source_name: str | None = None,
    notifier: Notifier | None = None,
    store: StateStore | None = None,
    adapters: Adapters | None = None,
    backfill: bool = True,
) -> tuple[Steward, Adapters]:
    """Everything the loop needs, from settings. Fills the window from history when the source has one.

    ``adapters`` replaces the configured source (a restarted agent watching the same cluster).
    """
    guard_clock_jumps = clock is None  # simulated clocks move wall time on purpose
    clock = clock or SystemClock()
    rules = load_rules(settings)
    check_calendar(settings.policy.working_hours)
    adapters = adapters or build_adapters(settings, clock, source_name)
    if store is None:
        store = StateStore(settings.store.url)
        store.create_schema()
    interval = settings.tick_seconds
    window = WindowStore(window_s=settings.store.window_minutes * 60, interval_s=interval)
    runner = ActionRunner(
        store,
        adapters.executors,
        ThrottledNotifier(
            _source_notifier(adapters, notifier or build_notifier(settings, store)),
            store,
            settings.policy.notices,
        ),
        clock,
        dry_run=settings.dry_run,
        approval=settings.policy.approval,
    )
    steward = Steward(
        source=adapters.source,
        store=store,
        window=window,
        rules=rules,
        runner=runner,
        clock=clock,
        policy=settings.policy,
        prices=settings.cost,
        stale_after_s=settings.analysis.stale_after_seconds,
        backoff_max_s=settings.source.backoff_max_seconds,
    )
    steward.insights = build_insights(settings, store)
    steward.parking = build_parking(settings, adapters, runner)
    steward.leadership = build_leadership(settings, store)
    steward.guard_clock_jumps = guard_clock_jumps
    if backfill:
        now = clock.now()
        start = now - timedelta(minutes=settings.store.window_minutes)
        steward.backfill(adapters.history(start, now, interval))
    return steward, adapters
