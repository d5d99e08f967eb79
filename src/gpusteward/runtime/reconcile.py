"""Crash recovery: actions a stopped agent (or a dead leader) left ``planned`` or ``executing``.

At start-up, and whenever a replica becomes the leader, the runtime collects those actions and
settles each on a tick that has fresh data, never running a step twice over:

* ``executing`` and the target is gone or the effect is visible (``Executor.current`` /
  ``verify`` read it again; for a notice: it was recorded as sent) → ``succeeded``;
* ``executing`` or ``planned`` and the workload still wastes its GPUs → finished now on the same
  action row (an interrupted run is first recorded as failed, then started again: the executor
  contract makes ``execute`` safe to repeat, e.g. a checkpoint signal and then SIGTERM);
* the workload is gone, or fresh data shows it no longer wastes → ``planned`` ones are skipped,
  ``executing`` ones failed (and retried with backoff, as any failure, only while waste holds);
* no fresh judgement yet (the window is still filling) → left for a later tick.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from gpusteward.domain.errors import ExecutionError, StoreError
from gpusteward.domain.models import Action, ActionStatus, Decision, Level, Workload
from gpusteward.domain.records import AuditNote
from gpusteward.runtime.runner import ActionResult, ActionRunner

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Judgement:
    """What this tick knows: the running workloads, those wasting, those judged on fresh data."""

    workloads: Mapping[str, Workload]
    wasting: Collection[str]
    judged: Collection[str]


def decision_of(action: Action, at_reason: str) -> Decision:
    """The decision an action row stands for (policy's own is gone with the crashed process)."""
    return Decision(
        workload_id=action.workload_id,
        at=action.created_at,
        level=action.level,
        step=action.step,
        reason=at_reason,
        rule=action.rule,
        gpu_uuids=action.gpu_uuids,
        idempotency_key=action.idempotency_key,
    )


class Reconciler:
    """Settles the actions a previous agent left unfinished, through the runner's executors."""

    def __init__(self, runner: ActionRunner) -> None:
        self.runner = runner
        self.store = runner.store

    def unfinished(self) -> list[Action]:
        """The actions to settle (read once, at start-up or when leadership is gained)."""
        found = self.store.unfinished_actions(dry_run=self.runner.dry_run)
        if found:
            log.warning("%d action(s) left unfinished by a previous agent: reconciling", len(found))
        return found

    def settle(
        self, orphans: Sequence[Action], now_known: Judgement
    ) -> tuple[list[ActionResult], list[Action]]:
        """Settle what this tick can; returns (what was done, what is left for a later tick)."""
        done: list[ActionResult] = []
        left: list[Action] = []
        for action in orphans:
            try:
                result = self._one(action, now_known)
            except StoreError:
                log.exception("state store failed while reconciling; the rest waits for the next tick")
                return done, left + list(orphans[orphans.index(action) :])
            if result is None:
                left.append(action)
            else:
                done.append(result)
        return done, left

    def _finish(self, action: Action, status: ActionStatus, detail: str) -> ActionResult:
        at = self.runner.clock.now()
        note = AuditNote(f"action.{status.value}", {"key": action.idempotency_key, "detail": detail})
        self.store.finish_action(action.id, status, detail, at, audit=note)
        return ActionResult(decision_of(action, detail), status, detail, action.id)

    def _one(self, action: Action, k: Judgement) -> ActionResult | None:
        if action.dry_run:
            return self._finish(action, ActionStatus.SKIPPED, "dry-run: interrupted by a restart")
        workload = k.workloads.get(action.workload_id)
        if action.status is ActionStatus.EXECUTING:
            effect = self._effect(action, workload)
            if effect:
                return self._finish(action, ActionStatus.SUCCEEDED, f"{effect} (checked after a restart)")
        wid = action.workload_id
        if workload is None:
            if action.status is ActionStatus.PLANNED:
                return self._finish(
                    action, ActionStatus.SKIPPED, "not started before a restart; the workload is gone"
                )
            return self._finish(action, ActionStatus.FAILED, "interrupted by a restart; the workload is gone")
        if wid in k.wasting:
            return self._resume(action, workload)
        if wid in k.judged:
            if action.status is ActionStatus.PLANNED:
                return self._finish(
                    action, ActionStatus.SKIPPED, "not started before a restart; the waste is no longer seen"
                )
            return self._finish(
                action, ActionStatus.FAILED, "interrupted by a restart; the waste is no longer seen"
            )
        return None

    def _effect(self, action: Action, workload: Workload | None) -> str:
        """What shows the step took effect, or ``""`` when nothing does (or it cannot be read)."""
        if action.level is Level.NOTIFY:
            return "the notice was sent" if self.store.notice_sent(action.idempotency_key) else ""
        if workload is None:
            return "the workload is gone"
        executor = self.runner.executor_for(workload, action.level)
        if executor is None:
            return ""
        decision = decision_of(action, "reconcile")
        try:
            current = executor.current(workload)
            if current is None or current.incarnation != workload.incarnation:
                return "the workload is gone"
            return "verified: the effect is visible" if executor.verify(decision, current) else ""
        except ExecutionError as e:
            log.warning("cannot read %s while reconciling %s: %s", workload.id, action.idempotency_key, e)
            return ""

    def _resume(self, action: Action, workload: Workload) -> ActionResult:
        if action.status is ActionStatus.EXECUTING:
            # Record the interruption, then run the step again on the same row (attempt + 1).
            at, detail = self.runner.clock.now(), "interrupted by a restart; finishing it"
            note = AuditNote("action.interrupted", {"key": action.idempotency_key, "detail": detail})
            action = self.store.finish_action(action.id, ActionStatus.FAILED, detail, at, audit=note)
        reason = f"finishing {action.step} left unfinished by a restart"
        return self.runner.carry_out(action, decision_of(action, reason), workload)
