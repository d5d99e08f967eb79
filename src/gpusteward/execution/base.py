"""Carrying out decisions: pre-flight → idempotency key → execute → verify → record.

Every acting decision becomes one row in the actions table *before* anything is done
(``planned``), moves to ``executing``, and ends ``succeeded``, ``failed`` or ``skipped``.
The idempotency key is unique in the database, so a step that already ran, or is
running in another process, is never run again; a failed one is retried only after
its backoff. In dry-run the row is written as ``skipped`` and nothing is touched.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpusteward.domain.errors import ExecutionError, PreflightFailed, StoreError
from gpusteward.domain.models import ActionStatus, Decision, Level, Workload
from gpusteward.domain.ports import Clock, Executor, Notifier
from gpusteward.notify.templates import notice_for
from gpusteward.store.db import StateStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ActionResult:
    """What happened to one decision this tick."""

    decision: Decision
    status: ActionStatus
    detail: str
    action_id: int | None = None


class ActionRunner:
    """Turns acting decisions into recorded actions through the executors and the notifier."""

    def __init__(
        self,
        store: StateStore,
        executors: Sequence[Executor],
        notifier: Notifier,
        clock: Clock,
        *,
        dry_run: bool = True,
    ) -> None:
        self.store = store
        self.executors = list(executors)
        self.notifier = notifier
        self.clock = clock
        self.dry_run = dry_run

    def run(self, decisions: Sequence[Decision], workloads: Mapping[str, Workload]) -> list[ActionResult]:
        """Carry out every acting decision; one failure never stops the others."""
        results: list[ActionResult] = []
        for decision in decisions:
            if not decision.acts:
                continue
            workload = workloads.get(decision.workload_id)
            if workload is None:
                continue
            try:
                result = self._one(decision, workload)
            except StoreError:
                # Without its record no action may run: stop acting this tick.
                log.exception("state store failed; no further actions this tick")
                break
            if result is not None:
                results.append(result)
        return results

    def retry(
        self, now: datetime, workloads: Mapping[str, Workload], wasting: Collection[str]
    ) -> list[ActionResult]:
        """Run again the failed actions whose backoff has passed, on workloads still wasting."""
        due = [a for a in self.store.retries_due(now, dry_run=self.dry_run) if a.workload_id in wasting]
        decisions = [
            Decision(
                workload_id=a.workload_id,
                at=now,
                level=a.level,
                step=a.step,
                reason=f"retry {a.attempts + 1} of {a.step} after: {a.detail}",
                rule=a.rule,
                gpu_uuids=a.gpu_uuids,
                idempotency_key=a.idempotency_key,
            )
            for a in due
        ]
        return self.run(decisions, workloads)

    def _executor_for(self, workload: Workload, level: Level) -> Executor | None:
        return next((e for e in self.executors if e.supports(workload, level)), None)

    def _one(self, decision: Decision, workload: Workload) -> ActionResult | None:
        now = self.clock.now()
        action = self.store.plan_action(decision, dry_run=self.dry_run, at=now)
        if action is None:
            return None  # this step already ran, is running, or waits for its retry time
        if self.dry_run:
            detail = f"dry-run: would {decision.step} ({decision.level.label})"
            self.store.finish_action(action.id, ActionStatus.SKIPPED, detail, now)
            if decision.level is Level.NOTIFY:
                self.store.record_notice(notice_for(decision, workload, dry_run=True), sent=False)
            self.store.audit("action.dry_run", now, workload.id, key=decision.idempotency_key, detail=detail)
            return ActionResult(decision, ActionStatus.SKIPPED, detail, action.id)
        self.store.start_action(action.id, now)
        self.store.audit("action.start", now, workload.id, key=decision.idempotency_key, step=decision.step)
        try:
            status, detail = self._execute(decision, workload)
        except PreflightFailed as e:
            status, detail = ActionStatus.SKIPPED, f"pre-flight: {e}"
        except ExecutionError as e:
            status, detail = ActionStatus.FAILED, str(e)
        except Exception as e:  # an executor bug must not stop the tick
            log.exception("executor crashed on %s", decision.idempotency_key)
            status, detail = ActionStatus.FAILED, f"executor crashed: {type(e).__name__}: {e}"
        done = self.clock.now()
        self.store.finish_action(action.id, status, detail, done)
        self.store.audit(
            f"action.{status.value}", done, workload.id, key=decision.idempotency_key, detail=detail
        )
        return ActionResult(decision, status, detail, action.id)

    def _execute(self, decision: Decision, workload: Workload) -> tuple[ActionStatus, str]:
        if decision.level is Level.NOTIFY:
            notice = notice_for(decision, workload, dry_run=False)
            self.notifier.send(notice)
            self.store.record_notice(notice, sent=True)
            return ActionStatus.SUCCEEDED, f"notified {workload.owner.user}"
        executor = self._executor_for(workload, decision.level)
        if executor is None:
            raise ExecutionError(f"no executor can {decision.step} a {workload.kind.value}")
        current = self._preflight(decision, workload, executor)
        # Tell the owner first, so the notice arrives even if the stop takes its whole grace.
        notice = notice_for(decision, current, dry_run=False)
        self.notifier.send(notice)
        self.store.record_notice(notice, sent=True)
        outcome = executor.execute(decision, current)
        if not outcome.ok:
            raise ExecutionError(outcome.detail)
        verified = outcome.verified or executor.verify(decision, current)
        suffix = "verified" if verified else "not yet verified; the ladder re-checks next tick"
        return ActionStatus.SUCCEEDED, f"{outcome.detail} ({suffix})"

    def _preflight(self, decision: Decision, workload: Workload, executor: Executor) -> Workload:
        """Re-check, just before acting, that the decision still applies to the same workload."""
        if self.store.is_paused():
            raise PreflightFailed("paused by the kill switch since the decision")
        current = executor.current(workload)
        if current is None:
            raise PreflightFailed("workload is gone")
        if current.incarnation != workload.incarnation:
            raise PreflightFailed("workload id now belongs to a different incarnation")
        if set(decision.gpu_uuids) - set(current.gpu_uuids):
            raise PreflightFailed("workload no longer holds the GPUs in the evidence")
        return current
