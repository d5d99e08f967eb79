"""Config → the loop: the integration from the registry, rules, store, window, the one runner,
notifier, leadership and the insights, tide and parking steps, put together into a ``Steward``."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

from gpusteward.analysis.rules import CompiledRule, RulePack, compile_rules, default_rule_pack, load_rule_pack
from gpusteward.domain.errors import ConfigError
from gpusteward.domain.integration import Integration
from gpusteward.domain.ports import Clock, Notifier, SystemClock
from gpusteward.domain.store_ports import TickStore
from gpusteward.notify.throttle import ThrottledNotifier
from gpusteward.policy.owner import check_calendar
from gpusteward.runtime.config import Settings
from gpusteward.runtime.consolidation_step import build_consolidation
from gpusteward.runtime.gap_history import build_gap_history
from gpusteward.runtime.health_step import build_health
from gpusteward.runtime.insights import build_insights
from gpusteward.runtime.instance_step import build_instance_step
from gpusteward.runtime.interruption_step import build_interruption
from gpusteward.runtime.ledger_recorder import LedgerRecorder
from gpusteward.runtime.loop import Steward
from gpusteward.runtime.notify_wiring import build_notifier
from gpusteward.runtime.parking_step import build_parking
from gpusteward.runtime.queues import QueueReader
from gpusteward.runtime.registry import build_integration, build_leadership
from gpusteward.runtime.rollout_step import RolloutStep
from gpusteward.runtime.runner import ActionRunner
from gpusteward.runtime.showback_step import build_showback
from gpusteward.runtime.tide_step import build_tide
from gpusteward.store.db import StateStore
from gpusteward.store.window import WindowStore

log = logging.getLogger(__name__)


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
    # A rule looking back further than the window keeps could never trip: refuse it, naming it.
    return compile_rules(RulePack(rules=rules), window_s=settings.store.window_minutes * 60)


def _with_source_channel(integration: Integration, notifier: Notifier) -> Notifier:
    return integration.wrap_notifier(notifier) if integration.wrap_notifier is not None else notifier


def build_steward(
    settings: Settings,
    *,
    clock: Clock | None = None,
    source_name: str | None = None,
    notifier: Notifier | None = None,
    store: TickStore | None = None,
    integration: Integration | None = None,
    backfill: bool = True,
) -> tuple[Steward, Integration]:
    """Everything the loop needs, from settings. Fills the window from history when the source has one.

    ``integration`` replaces the configured one (a restarted agent watching the same cluster);
    ``store`` the SQL store that ``store.url`` names (``store.memory.MemoryStore`` for tests).
    """
    guard_clock_jumps = clock is None  # simulated clocks move wall time on purpose
    clock = clock or SystemClock()
    rules = load_rules(settings)
    check_calendar(settings.policy.working_hours)
    integration = integration or build_integration(settings, clock, source_name)
    if store is None:
        sql = StateStore(settings.store.url)
        sql.create_schema()
        store = sql
    interval = settings.tick_seconds
    window = WindowStore(window_s=settings.store.window_minutes * 60, interval_s=interval)
    tide = build_tide(settings, integration)
    parking = build_parking(settings, integration, tide)
    consolidation = build_consolidation(settings, integration)
    health = build_health(settings, integration)
    instances = build_instance_step(settings, integration)
    # One runner for every step: the cloud instances' stops and starts (node workloads that name
    # their instance), the integration's executors, the node parking (and drains of failed GPUs'
    # nodes, through the same node control) and pool scaling.
    executors = [
        *(instances.executors(clock) if instances is not None else ()),
        *integration.executors,
        *(parking.executors(clock) if parking is not None else health.executors(clock)),
        *(tide.executors() if tide is not None else ()),
    ]
    runner = ActionRunner(
        store,
        executors,
        ThrottledNotifier(
            _with_source_channel(integration, notifier or build_notifier(settings, store)),
            store,
            settings.policy.notices,
        ),
        clock,
        dry_run=settings.dry_run,
        approval=settings.policy.approval,
        tell_admin_after_attempts=settings.policy.rollout.tell_admin_after_attempts,
    )
    steward = Steward(
        source=integration.source,
        store=store,
        window=window,
        rules=rules,
        runner=runner,
        clock=clock,
        policy=settings.policy,
        prices=settings.cost,
        ledger=LedgerRecorder(
            store,
            settings.cost,
            flush_every_s=settings.store.ledger_flush_seconds,
            instances=integration.instances,
        ),
        stale_after_s=settings.analysis.stale_after_seconds,
        backoff_max_s=settings.source.backoff_max_seconds,
    )
    steward.queues = QueueReader.of([integration])
    steward.insights = build_insights(settings, store)
    steward.gaps = build_gap_history(rules, store)
    steward.rollout = RolloutStep(store, settings.policy)
    steward.tide = tide
    steward.parking = parking
    steward.consolidation = consolidation
    steward.health = health
    steward.instances = instances
    steward.interruptions = build_interruption(settings, integration, store, runner.notifier, clock)
    steward.showback = build_showback(settings, store, runner.notifier)
    steward.leadership = build_leadership(settings, store, integration)
    steward.guard_clock_jumps = guard_clock_jumps
    if backfill:
        now = clock.now()
        start = now - timedelta(minutes=settings.store.window_minutes)
        steward.backfill(integration.history(start, now, interval))
    return steward, integration
