"""One tick of the loop: sense → analyse → decide → act → audit, and the loop around it.

A tick never dies of one bad part: a failing source backs off and the tick goes on
with the window it has (whose GPUs then go stale and are never acted on); one
failing action is recorded as failed and the others go on. SIGTERM lets the
current tick finish, then the loop exits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpusteward.analysis.cost import PriceTable
from gpusteward.analysis.engine import AnalysisInput, AnalysisResult, analyse
from gpusteward.analysis.rules import CompiledRule
from gpusteward.domain.errors import SourceError, StoreError
from gpusteward.domain.models import Decision, Finding, Gpu, Level, Observation, RuleAction, Workload
from gpusteward.domain.ports import Clock, Source
from gpusteward.execution.base import ActionResult, ActionRunner
from gpusteward.policy import PolicyInput, PolicySettings, decide
from gpusteward.runtime.ledger import LedgerRecorder
from gpusteward.store.db import StateStore
from gpusteward.store.window import WindowStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one tick saw and did."""

    at: datetime
    source_ok: bool
    gpus: int
    workloads: int
    findings: tuple[Finding, ...]
    decisions: tuple[Decision, ...]
    actions: tuple[ActionResult, ...]
    stale_gpus: int
    paused: bool
    errors: tuple[str, ...] = ()


@dataclass
class _SourceHealth:
    failures: int = 0
    retry_at: float = 0.0
    last_error: str = ""


@dataclass
class Steward:
    """The agent: owns the window, reads and writes the state store, drives the runner."""

    source: Source
    store: StateStore
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
    _health: _SourceHealth = field(default_factory=_SourceHealth)

    def __post_init__(self) -> None:
        if self.ledger is None:
            self.ledger = LedgerRecorder(self.store, self.prices)

    @property
    def dry_run(self) -> bool:
        return self.runner.dry_run

    def ingest(self, obs: Observation) -> Mapping[str, Workload]:
        """Feed one observation into the window; returns the running workloads by id."""
        for gpu in self.prices.with_prices(obs.gpus):
            self.gpus[gpu.uuid] = gpu
        workloads = {w.id: w for w in obs.workloads}
        holders = {uuid: w.id for w in obs.workloads for uuid in w.gpu_uuids}
        self.window.register(g.uuid for g in obs.gpus)
        self.window.ingest(obs.at, obs.samples, {g.uuid: holders.get(g.uuid, "") for g in obs.gpus})
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
        now = self.clock.now()
        obs, error = self._observe(now)
        errors = [error] if error else []
        if obs is not None:
            self.workloads = self.ingest(obs)
            errors.extend(obs.errors)
            self.store.remember_workloads(list(self.workloads.values()), now)
        workloads = self.workloads
        analysis = analyse(
            self.rules,
            AnalysisInput(
                view=self.window.view(now),
                gpus=self.gpus,
                workloads=list(workloads.values()),
                now=now,
                stale_after_s=self.stale_after_s,
            ),
        )
        decisions, paused = self._decide(now, analysis, workloads)
        actions = self.runner.run(decisions, workloads)
        if not paused:
            # Failed steps come back after their backoff, only while the waste still holds.
            wasting = {
                f.workload_id for f in analysis.findings if f.action is RuleAction.RECLAIM and f.workload_id
            }
            actions += self.runner.retry(now, workloads, wasting)
        self._record_ledger(now, obs, workloads, analysis.findings, actions)
        return TickReport(
            at=now,
            source_ok=obs is not None,
            gpus=len(self.gpus),
            workloads=len(workloads),
            findings=analysis.findings,
            decisions=decisions,
            actions=tuple(actions),
            stale_gpus=len(analysis.stale_gpus),
            paused=paused,
            errors=tuple(errors),
        )

    def _record_ledger(
        self,
        now: datetime,
        obs: Observation | None,
        workloads: Mapping[str, Workload],
        findings: Sequence[Finding],
        actions: Sequence[ActionResult],
    ) -> None:
        if self.ledger is None:
            return
        try:
            self.ledger.record(now, obs, workloads, findings, actions, self.gpus)
        except StoreError:
            # After the actions: a ledger that cannot be written must not fail the tick.
            log.exception("ledger not written; its amounts wait for the next tick")

    def _decide(
        self, now: datetime, analysis: AnalysisResult, workloads: Mapping[str, Workload]
    ) -> tuple[tuple[Decision, ...], bool]:
        store = self.store
        store.record_findings(analysis.findings, now)
        found = {(f.workload_id, f.rule) for f in analysis.findings}
        # An episode ends only on evidence: its rule judged the workload and did not trip, or
        # the workload is gone. A restart's empty window or a stale GPU ends nothing.
        store.close_findings(
            [
                (wid, rule)
                for wid, rule in store.open_episode_keys()
                if (wid, rule) not in found
                and (
                    wid not in workloads
                    or (wid not in analysis.unknown_workloads and wid not in analysis.unjudged.get(rule, ()))
                )
            ],
            now,
        )
        paused = store.is_paused()
        recent, recent_gpus = store.count_actions_since(
            now - timedelta(hours=1), min_level=Level.GRACEFUL_STOP, dry_run=self.dry_run
        )
        result = decide(
            PolicyInput(
                now=now,
                findings=analysis.findings,
                workloads=workloads,
                states=store.load_ladders(self.dry_run),
                unknown_workloads=analysis.unknown_workloads,
                unjudged=analysis.unjudged,
                gpus=self.gpus,
                paused=paused,
                recent_actions=recent,
                recent_action_gpus=recent_gpus,
            ),
            self.policy,
        )
        store.update_ladders(result.states.values(), result.cleared, dry_run=self.dry_run)
        store.record_decisions(result.decisions)
        return result.decisions, paused

    def backfill(self, observations: Sequence[Observation]) -> None:
        """Fill the window from history so the first tick can already judge."""
        for obs in observations:
            self.ingest(obs)


class StopFlag:
    """Set by SIGTERM/SIGINT; the loop finishes its tick and returns."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self, *_: object) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        return self._event.wait(seconds)


class Wake:
    """Lets another thread (the Alertmanager receiver) start the next tick at once."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reasons: list[str] = []

    def set(self, reason: str = "") -> None:
        with self._lock:
            self._reasons = [*self._reasons[-99:], reason]
        self._event.set()

    def take(self) -> list[str]:
        """The reasons given since the last call; clears the wake-up."""
        with self._lock:
            reasons, self._reasons = self._reasons, []
            self._event.clear()
        return reasons

    def wait(self, seconds: float, stop: StopFlag) -> bool:
        """Until woken (True), stopped or ``seconds`` passed. Polls ``stop``: a signal
        handler sets it without waking this event."""
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._event.wait(min(left, 0.2)):
                return True
        return False


def run_forever(
    steward: Steward,
    interval_s: float,
    stop: StopFlag,
    *,
    max_ticks: int | None = None,
    real_sleep: bool = True,
    wake: Wake | None = None,
    on_tick: Callable[[Steward, TickReport, float], None] | None = None,
) -> int:
    """Tick every ``interval_s`` until ``stop`` is set; returns the number of ticks run.

    ``wake`` starts the next tick early; ``on_tick(steward, report, seconds)`` runs after
    each tick on this thread (metrics)."""
    ticks = 0
    while not stop.is_set() and (max_ticks is None or ticks < max_ticks):
        started = steward.clock.monotonic()
        reasons = wake.take() if wake is not None else []
        if reasons:
            log.info("tick now: %s", "; ".join(r for r in reasons if r)[:500])
        try:
            report = steward.tick()
            log.info(
                "tick: %d gpus, %d workloads, %d findings, %d actions%s",
                report.gpus,
                report.workloads,
                len(report.findings),
                len(report.actions),
                " (paused)" if report.paused else "",
            )
            if on_tick is not None:
                on_tick(steward, report, steward.clock.monotonic() - started)
        except Exception:
            # A tick that fails as a whole (the database is down, say) is retried next interval.
            log.exception("tick failed")
        ticks += 1
        remaining = interval_s - (steward.clock.monotonic() - started)
        if remaining > 0 and (max_ticks is None or ticks < max_ticks):
            if real_sleep and wake is not None:
                wake.wait(remaining, stop)
            elif real_sleep:
                stop.wait(remaining)
            else:
                steward.clock.sleep(remaining)
    return ticks
