"""One tick of the loop, read top to bottom in ``Steward._tick``:

    sense → analyse → leader gate → plan → act → record

1. **Sense**: the source's observation into the window (a failing source backs off; the tick
   goes on with the window it has, whose GPUs then go stale and are never acted on).
2. **Analyse**: the rules, insights (anomalies, advice), the tide's forecasts and replica plans,
   the nodes' idle time for parking. Findings and plans only: nothing here changes the world or
   the state store, so a follower replica runs it too and takes over warm.
3. **Leader gate**: only the leader (``Leadership``; always, without HA) goes past this line.
4. **Plan**: policy turns findings, park plans and scale plans into ``Decision``s (ladders,
   guards, approvals, cooldown, pause).
5. **Act**: one ``ActionRunner`` carries out every decision through the executors (workloads,
   nodes, pools): pre-flight, idempotency key, dry-run, approval, retry, audit. Reconciliation
   of what a crash left unfinished and the follow-ups of two-phase stops are steps here.
6. **Record**: ladders (after the actions: a crash in between re-emits the same step under the
   same idempotency key, and the action row decides, so nothing runs twice), decisions, the
   ledger, the owners' digests, the lifetimes and the demand history.

With ``guard_clock_jumps`` a wall-clock step (NTP) shifts the stored ladder times by the step, so
ladder timing follows the monotonic clock in a process. The loop around the tick: runtime/driver.py.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from gpusteward.analysis.cost import PriceTable
from gpusteward.analysis.engine import AnalysisInput, AnalysisResult, analyse
from gpusteward.analysis.rules import CompiledRule
from gpusteward.domain.errors import SourceError, StoreError
from gpusteward.domain.models import Action, Decision, Gpu, Hold, Observation, RuleAction, Workload
from gpusteward.domain.ports import Clock, Leadership, Source
from gpusteward.domain.store_ports import TickStore
from gpusteward.policy import PolicySettings
from gpusteward.policy.approval import hold_for_approval
from gpusteward.runtime import collector
from gpusteward.runtime.consolidation_step import ConsolidationStep
from gpusteward.runtime.followup import follow_up
from gpusteward.runtime.gap_history import GapHistory
from gpusteward.runtime.health_step import HealthStep
from gpusteward.runtime.holder_map import HolderMap
from gpusteward.runtime.infra_plans import infra_plans
from gpusteward.runtime.insights import Insights
from gpusteward.runtime.instance_step import InstanceStep
from gpusteward.runtime.interruption_step import InterruptionStep
from gpusteward.runtime.ledger_recorder import LedgerRecorder
from gpusteward.runtime.logs import log_context, new_tick_id, tick_id
from gpusteward.runtime.parking_step import ParkingStep
from gpusteward.runtime.planning import plan_ladders, rebase_ladders, save_ladders, with_runner_holds
from gpusteward.runtime.queues import QueueReader
from gpusteward.runtime.reconcile import Judgement, Reconciler
from gpusteward.runtime.rollout_step import RolloutStep
from gpusteward.runtime.runner import ActionResult, ActionRunner
from gpusteward.runtime.showback_step import ShowbackStep
from gpusteward.runtime.tick_report import TickReport
from gpusteward.runtime.tide_step import TideStep
from gpusteward.store.window import WindowStore

log = logging.getLogger(__name__)


@dataclass
class _SourceHealth:
    failures: int = 0
    retry_at: float = 0.0
    last_error: str = ""


@dataclass
class Steward:
    """The agent: owns the window, reads and writes the state store, drives the runner."""

    source: Source
    store: TickStore
    window: WindowStore
    rules: Sequence[CompiledRule]
    runner: ActionRunner
    clock: Clock
    policy: PolicySettings
    prices: PriceTable
    stale_after_s: float = 180.0
    backoff_max_s: float = 300.0
    gpus: dict[str, Gpu] = field(default_factory=dict)
    #: The workloads of the last good observation: while the source is down they are
    #: still there as far as we know, their GPUs go stale, and their ladders freeze.
    workloads: Mapping[str, Workload] = field(default_factory=dict)
    #: The daily waste and savings ledger (runtime/ledger.py); one is made when None is given.
    ledger: LedgerRecorder | None = None
    #: Anomalies and advice, found after the rules: runtime/insights.py.
    insights: Insights | None = None
    #: The idle-gap record behind ``p_busy_again(H)``: runtime/gap_history.py.
    gaps: GapHistory | None = None
    #: Tidal scaling: forecasts and replica plans, then scale decisions: runtime/tide_step.py.
    tide: TideStep | None = None
    #: L4 parking of idle nodes: node idle time, then park/unpark decisions: runtime/parking_step.py.
    parking: ParkingStep | None = None
    #: L4 consolidation of light services onto shared GPUs: runtime/consolidation_step.py.
    consolidation: ConsolidationStep | None = None
    #: GPU health per GPU for the report, and drains of failed GPUs' nodes (L4): runtime/health_step.py.
    health: HealthStep | None = None
    #: L4 stops of idle nodes' cloud instances: runtime/instance_step.py.
    instances: InstanceStep | None = None
    #: Roll-out scopes' stages into the plan; stops, false kills, reclaim counts: runtime/rollout_step.py.
    rollout: RolloutStep | None = None
    #: Spot interruption notices → checkpoint signals on the node: runtime/interruption_step.py.
    interruptions: InterruptionStep | None = None
    showback: ShowbackStep | None = None  #: closes months, sends budget alerts: runtime/showback_step.py
    queues: QueueReader = field(default_factory=QueueReader)  #: schedulers' queues, read each tick
    leadership: Leadership | None = None  #: who may act when two replicas run (None: this one)
    #: Shift stored ladder times by a wall-clock step (on with the system clock; simulated
    #: clocks that move wall time on purpose leave it off).
    guard_clock_jumps: bool = False
    #: A wall-clock step smaller than this (seconds, beyond the monotonic time) is no step.
    clock_jump_tolerance_s: float = 5.0
    _health: _SourceHealth = field(default_factory=_SourceHealth)
    _leading: bool = False
    #: Actions a previous agent left unfinished; None: not read yet (read on gaining leadership).
    _orphans: list[Action] | None = None
    _clock_mark: tuple[datetime, float] | None = None

    def __post_init__(self) -> None:
        if self.ledger is None:
            self.ledger = LedgerRecorder(self.store, self.prices)
        self.reconciler = Reconciler(self.runner)
        self._gpus_seen: tuple[Gpu, ...] | None = None
        self._holders = HolderMap()
        self.unsnoozable_rules = frozenset(r.name for r in self.rules if not r.spec.snoozable)

    @property
    def dry_run(self) -> bool:
        return self.runner.dry_run

    def ingest(self, obs: Observation) -> Mapping[str, Workload]:
        """Feed one observation into the window; returns the running workloads by id."""
        if obs.gpus is not self._gpus_seen:  # a source may hand back its unchanged GPUs as they were
            self.gpus.update((g.uuid, g) for g in self.prices.with_prices(obs.gpus))
            self.window.register(g.uuid for g in obs.gpus)
            self._gpus_seen = obs.gpus
        workloads, holders = self._holders.of(obs)
        self.window.ingest(obs.at, obs.samples, holders)
        return workloads

    def _observe(self, now: datetime) -> tuple[Observation | None, str]:
        health = self._health
        if health.failures and self.clock.monotonic() < health.retry_at:
            return None, f"source {self.source.name} backing off after: {health.last_error}"
        try:
            obs = self.source.observe(now)
        except SourceError as e:
            health.failures += 1
            health.last_error = str(e)
            delay = min(self.backoff_max_s, 2.0 ** min(health.failures, 16))
            health.retry_at = self.clock.monotonic() + delay
            log.warning("source %s failed (%s); retrying in %.0f s", self.source.name, e, delay)
            return None, f"source {self.source.name} failed: {e}"
        if health.failures:
            log.info("source %s recovered after %d failures", self.source.name, health.failures)
        self._health = _SourceHealth()
        return obs, ""

    def tick(self) -> TickReport:
        try:
            with log_context(tick=tick_id() or new_tick_id()), collector.held_off():  # runtime/collector.py
                return self._tick()
        except StoreError:
            self._orphans = None  # an action may have been left half-recorded: settle it next time
            raise

    def _tick(self) -> TickReport:
        now = self.clock.now()
        jump_s = self._clock_jump(now)
        # 1. Sense.
        obs, error = self._observe(now)
        errors = [error] if error else []
        queue = self.queues.read(now, errors)  # a queue that fails is an error line, never the tick's end
        if obs is not None:
            self.workloads = self.ingest(obs)
            errors.extend(obs.errors)
        workloads = self.workloads
        # 2. Analyse: findings and plans. Nothing changes here, on any replica.
        analysis = self._analyse(now)
        if self.health is not None:  # a failed GPU stays failed for its holder: runtime/health_step.py
            analysis = self.health.observe(now, self.window.view(now), analysis, self.gpus, workloads)
        report = TickReport(
            at=now,
            source_ok=obs is not None,
            gpus=len(self.gpus),
            workloads=len(workloads),
            findings=analysis.findings,
            decisions=(),
            actions=(),
            stale_gpus=len(analysis.stale_gpus),
            paused=False,
            errors=tuple(errors),
            leader=False,
            queue=queue,
            health=self.health.states if self.health is not None else {},
        )
        # 3. The leader gate: a follower has sensed and analysed, and decides and does nothing.
        if not self._lead(now):
            return report
        if jump_s:
            rebase_ladders(self.store, jump_s, now, dry_run=self.dry_run)
        if obs is not None:
            self.store.remember_workloads(list(workloads.values()), now)
        # 4. Plan: every change is a Decision (ladder steps, parks and unparks, pool scales).
        paused = self.store.is_paused()
        infra, targets = infra_plans(self.store, now, paused, self, self.policy.approval)
        if self.consolidation is not None:  # one move (or rollback) at most; its workload is running
            infra += self.consolidation.plan(now, workloads, paused)
        ladders = plan_ladders(
            self.store,
            self.policy,
            now,
            analysis,
            workloads,
            self.gpus,
            dry_run=self.dry_run,
            unsnoozable_rules=self.unsnoozable_rules,
            also={d.workload_id for d in infra},
            queue=queue,
            **(self.rollout.inputs() if self.rollout is not None else {}),
        )
        infra = hold_for_approval(infra, ladders.approvals, now, self.policy.approval)
        decisions = [*ladders.result.decisions, *infra]
        # 5. Act: one runner. What a crash left unfinished and due follow-ups come first.
        if self.interruptions is not None:  # a node about to be taken: checkpoint signals first of all
            self.interruptions.act(now, workloads, self.gpus)
        targets = {**workloads, **targets}
        wasting = {
            f.workload_id for f in analysis.findings if f.action is RuleAction.RECLAIM and f.workload_id
        }
        actions = self._reconcile(analysis, targets, wasting)
        actions += follow_up(self.runner, now, targets)
        ran = self.runner.run(decisions, targets)
        actions += [a for a in ran if a.hold is Hold.NONE]
        if not ladders.paused:
            # Failed steps come back after their backoff, only while the waste still holds.
            actions += self.runner.retry(now, targets, wasting)
        # 6. Record and tell.
        save_ladders(self.store, ladders, ran, dry_run=self.dry_run)
        decided = with_runner_holds(decisions, ran)
        self.store.record_decisions(decided)
        self._record(now, obs, analysis, decided, actions)
        self.queues.record(self.store, queue, now)  # queue time for the reports; a job counts once
        if self.rollout is not None:
            self.rollout.record(now, targets, self.gpus, decided, actions, self.runner)
        return replace(report, decisions=decided, actions=tuple(actions), paused=ladders.paused, leader=True)

    def _analyse(self, now: datetime) -> AnalysisResult:
        """The rules, then insights; the tide's plans and the nodes' idle time (for parking)."""
        if self.gaps is not None:
            self.gaps.update(self.window.view(now), list(self.workloads.values()), now)
        analysis = self.analyse(now)
        steps = (self.insights, self.tide, self.parking, self.consolidation, self.instances)
        if all(s is None for s in steps):
            return analysis
        view = self.window.view(now)
        workloads = list(self.workloads.values())
        if self.insights is not None:
            analysis = self.insights.analyse(now, view, self.gpus, workloads, analysis)
        if self.tide is not None:
            try:
                self.tide.observe_window(view, self.gpus, workloads, now)
                self.tide.forecast(now)
            except Exception:  # a forecast must not fail the tick: the pools stay as they are
                log.exception("tide forecast failed; no pool is scaled this tick")
        if self.parking is not None:
            self.parking.observe(now, view, self.gpus, self.workloads)
        if self.consolidation is not None:
            self.consolidation.observe(now, view, self.gpus, self.workloads)
        if self.instances is not None:
            self.instances.observe(now, view, self.gpus, self.workloads)
        return analysis

    def _record(
        self,
        now: datetime,
        obs: Observation | None,
        analysis: AnalysisResult,
        decisions: Sequence[Decision],
        actions: Sequence[ActionResult],
    ) -> None:
        if self.tide is not None:
            self.tide.settle(now, decisions, actions)
        if self.insights is not None:
            self.insights.record(now)
        if self.consolidation is not None:
            self.consolidation.settle(now, actions)
            self.consolidation.record(now, self.store, self.prices)
        if self.gaps is not None:
            self.gaps.save_due(now, list(self.workloads))
        flush = getattr(self.runner.notifier, "flush", None)
        if callable(flush):
            flush(now)  # a throttling notifier sends yesterday's digests
        if self.ledger is None:
            return
        try:
            self.ledger.record(now, obs, self.workloads, analysis.findings, actions, self.gpus)
        except StoreError:
            # After the actions: a ledger that cannot be written must not fail the tick.
            log.exception("ledger not written; its amounts wait for the next tick")
        if self.showback is not None:
            self.showback.run(now)

    def analyse(self, now: datetime, rules: Sequence[CompiledRule] | None = None) -> AnalysisResult:
        """The rules (``rules`` instead of the loop's own: a rule edit's preview) over the window
        and the workloads of the last good observation, at ``now``."""
        return analyse(
            self.rules if rules is None else rules,
            AnalysisInput(
                view=self.window.view(now),
                gpus=self.gpus,
                workloads=list(self.workloads.values()),
                now=now,
                stale_after_s=self.stale_after_s,
                history=self.gaps,
            ),
        )

    # -- leadership, crash recovery, clock steps ---------------------------------------------
    def _lead(self, now: datetime) -> bool:
        if self.leadership is None:
            leading = True
        else:
            try:
                leading = self.leadership.acquire()
            except Exception:  # a broken lock connection means: not the leader now
                log.exception("leadership check failed; acting as a follower this tick")
                leading = False
        ha = self.leadership is not None and self.leadership.name != "none"
        if leading != self._leading and ha and self.leadership is not None:
            log.warning("%s leadership %s", self.leadership.name, "gained" if leading else "lost")
            if leading:
                self.store.audit("leadership.gained", now, None, via=self.leadership.name)
        if leading and not self._leading:
            self._orphans = None  # a dead leader may have left actions unfinished
            self.store.reread()  # and opened or ended episodes meanwhile
        if leading != self._leading and self.ledger is not None:
            self.ledger.reset()  # the other replica may have counted meanwhile: read its marks
        self._leading = leading
        return leading

    def settle(self) -> None:
        """Write what waits in memory if this replica leads (the loop stops): the ledger's amounts,
        then the open episodes' and ladders' latest, even if the ledger's write failed."""
        if not self._leading:
            return
        try:
            if self.ledger is not None:
                self.ledger.flush(self.clock.now())
        finally:
            self.store.flush_kept()

    def _reconcile(
        self, analysis: AnalysisResult, workloads: Mapping[str, Workload], wasting: set[str]
    ) -> list[ActionResult]:
        if self._orphans is None:
            self._orphans = self.reconciler.unfinished()
        if not self._orphans:
            return []
        unjudged = set(analysis.unknown_workloads).union(*analysis.unjudged.values())
        judged = {w for w in workloads if w not in unjudged}
        done, self._orphans = self.reconciler.settle(self._orphans, Judgement(workloads, wasting, judged))
        return done

    def _clock_jump(self, now: datetime) -> float:
        """Seconds the wall clock stepped since the last tick beyond the monotonic time, or 0."""
        if not self.guard_clock_jumps:
            return 0.0
        mono = self.clock.monotonic()
        mark, self._clock_mark = self._clock_mark, (now, mono)
        if mark is None:
            return 0.0
        jump = (now - mark[0]).total_seconds() - (mono - mark[1])
        return jump if abs(jump) > self.clock_jump_tolerance_s else 0.0

    def backfill(self, observations: Sequence[Observation]) -> None:
        """Fill the window from history so the first tick can already judge."""
        for obs in observations:
            self.ingest(obs)
