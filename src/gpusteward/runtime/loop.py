"""One tick of the loop: sense → analyse → decide → act → audit, and the loop around it.

A tick never dies of one bad part: a failing source backs off and the tick goes on
with the window it has (whose GPUs then go stale and are never acted on); one
failing action is recorded as failed and the others go on. SIGTERM lets the
current tick finish, then the loop exits.

Safety around the tick (issue 7): only the leader (``Leadership``; always, without HA) decides,
acts and writes; a follower senses and analyses so it can take over warm. Actions are carried
out before the ladders that emitted them are saved, so a crash in between re-emits the same
step under the same idempotency key (the action row decides, nothing runs twice); actions a
crash left unfinished are settled by ``execution.reconcile`` when leadership is gained. With
``guard_clock_jumps`` a wall-clock step (NTP) shifts the stored ladder times by the step, so
ladder timing follows the monotonic clock within a process. A tick that fails as a whole (the
database is down) is retried with exponential backoff.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from gpusteward.analysis.cost import PriceTable
from gpusteward.analysis.engine import AnalysisInput, AnalysisResult, analyse
from gpusteward.analysis.rules import CompiledRule
from gpusteward.domain.errors import ConfigError, SourceError, StoreError
from gpusteward.domain.models import (
    Action,
    Decision,
    Finding,
    Gpu,
    Hold,
    LadderState,
    Level,
    Observation,
    RuleAction,
    Workload,
)
from gpusteward.domain.ports import Clock, Leadership, Source
from gpusteward.policy import PolicyInput, PolicySettings, decide
from gpusteward.policy.owner import ApprovalView, SnoozeView
from gpusteward.runtime.followup import follow_up
from gpusteward.runtime.insights import Insights
from gpusteward.runtime.ledger_recorder import LedgerRecorder
from gpusteward.runtime.reconcile import Judgement, Reconciler
from gpusteward.runtime.runner import ActionResult, ActionRunner
from gpusteward.store import queries
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
    #: False on a follower replica: it sensed and analysed, but decided and did nothing.
    leader: bool = True


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
    #: Adds findings after the rules (anomalies, advice, the tide): runtime/insights.py.
    insights: Insights | None = None
    #: L4 parking of idle nodes, run by the leader after the actions: runtime/parking.py.
    parking: Callable[[Steward, datetime], Sequence[ActionResult]] | None = None
    #: Who may act when two replicas run (None: this one always does).
    leadership: Leadership | None = None
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
        self.unsnoozable_rules = frozenset(r.name for r in self.rules if not r.spec.snoozable)

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
        try:
            return self._tick()
        except StoreError:
            self._orphans = None  # an action may have been left half-recorded: settle it next time
            raise

    def _tick(self) -> TickReport:
        now = self.clock.now()
        jump_s = self._clock_jump(now)
        obs, error = self._observe(now)
        errors = [error] if error else []
        if obs is not None:
            self.workloads = self.ingest(obs)
            errors.extend(obs.errors)
        leader = self._lead(now)
        if obs is not None and leader:
            self.store.remember_workloads(list(self.workloads.values()), now)
        workloads = self.workloads
        analysis = self.analyse(now)
        if self.insights is not None:
            analysis = self.insights(self, now, analysis)
        # What a follower reports: it sensed and analysed, and decided and did nothing.
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
        )
        if not leader:
            return report
        # Past the leader gate: only now may anything change (the tide scales pools here).
        if self.insights is not None:
            self.insights.lead(now)
        if jump_s:
            self._rebase_ladders(jump_s, now)
        wasting = {
            f.workload_id for f in analysis.findings if f.action is RuleAction.RECLAIM and f.workload_id
        }
        actions = self._reconcile(analysis, workloads, wasting)
        # Graceful stops whose grace is over are finished first (they never block a tick).
        actions += follow_up(self.runner, now, workloads)
        decisions, paused, acted = self._decide(now, analysis, workloads)
        actions += acted
        if not paused:
            # Failed steps come back after their backoff, only while the waste still holds.
            actions += self.runner.retry(now, workloads, wasting)
        if self.parking is not None:
            actions += self.parking(self, now)
        flush = getattr(self.runner.notifier, "flush", None)
        if callable(flush):
            flush(now)  # a throttling notifier sends yesterday's digests
        self._record_ledger(now, obs, workloads, analysis.findings, actions)
        return replace(report, decisions=decisions, actions=tuple(actions), paused=paused, leader=True)

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
            ),
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
        self._leading = leading
        return leading

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

    def _rebase_ladders(self, jump_s: float, now: datetime) -> None:
        """Move the ladders' step times with a wall-clock step so no step fires early (or late).
        ``first_seen_at`` stays: it names the episode in idempotency keys."""
        shift = timedelta(seconds=jump_s)

        def moved(at: datetime | None) -> datetime | None:
            return None if at is None else at + shift

        states = self.store.load_ladders(self.dry_run)
        rebased = [
            replace(
                s,
                step_at=moved(s.step_at),
                first_warned_at=moved(s.first_warned_at),
                clean_since=moved(s.clean_since),
            )
            for s in states.values()
        ]
        self.store.update_ladders(rebased, (), dry_run=self.dry_run)
        log.warning("wall clock stepped by %+.0f s; %d ladder(s) shifted with it", jump_s, len(rebased))
        self.store.audit("clock.step", now, None, seconds=round(jump_s, 3), ladders=len(rebased))

    # -- decide and act -----------------------------------------------------------------------
    def _owner_controls(
        self, now: datetime, ids: set[str]
    ) -> tuple[Mapping[str, ApprovalView] | None, Mapping[str, SnoozeView]]:
        store = self.store
        snoozes = {w: SnoozeView(s.until, s.by, s.reason) for w, s in store.active_snoozes(now).items()}
        if self.dry_run or self.policy.approval.min_level is None:
            return None, snoozes
        store.expire_approvals(now)
        found = queries.latest_approvals(store, ids, dry_run=False)
        approvals = {
            key: ApprovalView(r.id, r.status, r.expires_at, r.decided_by, r.decision_reason, n)
            for key, (r, n) in found.items()
        }
        return approvals, snoozes

    def _decide(
        self, now: datetime, analysis: AnalysisResult, workloads: Mapping[str, Workload]
    ) -> tuple[tuple[Decision, ...], bool, list[ActionResult]]:
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
        states = store.load_ladders(self.dry_run)
        ids = set(states) | {f.workload_id for f in analysis.findings if f.workload_id}
        approvals, snoozes = self._owner_controls(now, ids)
        result = decide(
            PolicyInput(
                now=now,
                findings=analysis.findings,
                workloads=workloads,
                states=states,
                unknown_workloads=analysis.unknown_workloads,
                unjudged=analysis.unjudged,
                gpus=self.gpus,
                paused=paused,
                recent_actions=recent,
                recent_action_gpus=recent_gpus,
                approvals=approvals,
                snoozes=snoozes,
                unsnoozable_rules=self.unsnoozable_rules,
            ),
            self.policy,
        )
        # Store each episode that begins now before acting: its first_seen_at names the steps'
        # idempotency keys, so a crash or a failed save after acting re-emits the same keys (whose
        # action rows say "done") and never a new episode's. Ladders already stored need nothing.
        begun = [
            _untaken(s, None) for w, s in result.states.items() if _episode(states.get(w)) != _episode(s)
        ]
        if begun:
            store.update_ladders(begun, (), dry_run=self.dry_run)
        # Act first, then save the ladders: a crash in between re-emits the same step (same key).
        actions = self.runner.run(result.decisions, workloads)
        held = {a.decision.workload_id: a for a in actions if a.hold is not Hold.NONE}
        saved = [_untaken(s, states.get(w)) if w in held else s for w, s in result.states.items()]
        store.update_ladders(saved, result.cleared, dry_run=self.dry_run)
        decisions = tuple(
            replace(d, hold=held[d.workload_id].hold, reason=f"{d.reason} {held[d.workload_id].detail}.")
            if d.workload_id in held and d.acts
            else d
            for d in result.decisions
        )
        store.record_decisions(decisions)
        return decisions, paused, [a for a in actions if a.hold is Hold.NONE]

    def backfill(self, observations: Sequence[Observation]) -> None:
        """Fill the window from history so the first tick can already judge."""
        for obs in observations:
            self.ingest(obs)


def _episode(state: LadderState | None) -> tuple[str, datetime] | None:
    """What names a ladder's episode in its idempotency keys."""
    return None if state is None else (state.incarnation, state.first_seen_at)


def _untaken(state: LadderState, prev: LadderState | None) -> LadderState:
    """``state`` without the step that the runner did not take (its approval lapsed meanwhile)."""
    if prev is None:
        return replace(state, step="", step_at=None, first_warned_at=None)
    return replace(state, step=prev.step, step_at=prev.step_at, first_warned_at=prev.first_warned_at)


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
    failures = 0
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
            failures = 0
        except ConfigError:
            raise  # the settings cannot work (a window too large for memory): retrying cannot help
        except Exception:
            # A tick that fails as a whole (the database is down, say): no action ran without its
            # record; retry after 2, 4, 8 … intervals, at most backoff_max_s.
            failures += 1
            log.exception("tick failed (%d in a row)", failures)
        ticks += 1
        wait = interval_s
        if failures:
            wait = min(max(interval_s, steward.backoff_max_s), interval_s * 2.0 ** min(failures, 16))
        remaining = wait - (steward.clock.monotonic() - started)
        if remaining > 0 and (max_ticks is None or ticks < max_ticks):
            if real_sleep and wake is not None:
                wake.wait(remaining, stop)
            elif real_sleep:
                stop.wait(remaining)
            else:
                steward.clock.sleep(remaining)
    if steward.leadership is not None:
        try:
            steward.leadership.release()  # the other replica takes over at once
        except Exception:
            log.exception("could not release %s leadership", steward.leadership.name)
    return ticks
