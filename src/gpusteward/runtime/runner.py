"""Carrying out decisions: pre-flight → idempotency key → execute → verify → record.

Every acting decision becomes one row in the actions table *before* anything is done
(``planned``), moves to ``executing``, and ends ``succeeded``, ``failed`` or ``skipped``.
The idempotency key is unique in the database, so a step that already ran, or is
running in another process, is never run again; a failed one is retried only after
its backoff. In dry-run the row is written as ``skipped`` and nothing is touched.

Approvals (``policy.approval``): a step that needs one is held by policy until approved; the
runner asks for it (``Controls.request_approval``, an admin notice) and, once approved, marks the
approval used right before the action is planned. An expired approval never runs. Dry-run asks
nobody: it previews every step as if approved.

Two-phase graceful stops: an executor that implements ``StagedExecutor`` only *begins* an L2
stop (the checkpoint signal) and returns at once; the action stays ``executing`` with its
``due_at`` (audited ``action.pending``), and ``execution.followup`` completes it on a later tick,
so a tick never waits out a grace period.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from gpusteward.domain.errors import ControlError, ExecutionError, PreflightFailed, StoreError
from gpusteward.domain.models import (
    Action,
    ActionStatus,
    ApprovalStatus,
    Decision,
    Hold,
    Level,
    Notice,
    Workload,
)
from gpusteward.domain.ports import Clock, Executor, Notifier, StagedExecutor
from gpusteward.domain.records import ApprovalRecord, AuditNote
from gpusteward.domain.store_ports import RunnerStore
from gpusteward.notify.templates import notice_for
from gpusteward.policy.approval import needs_approval
from gpusteward.policy.owner import approval_key
from gpusteward.policy.settings import ApprovalSettings
from gpusteward.runtime.logs import log_context

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ActionResult:
    """What happened to one decision this tick."""

    decision: Decision
    status: ActionStatus
    detail: str
    action_id: int | None = None
    #: Not ``NONE`` when the runner held an acting decision (its approval expired or was used up
    #: before it ran): nothing was done or recorded as an action, and its ladder must not advance.
    hold: Hold = Hold.NONE


class ActionRunner:
    """Turns acting decisions into recorded actions through the executors and the notifier."""

    def __init__(
        self,
        store: RunnerStore,
        executors: Sequence[Executor],
        notifier: Notifier,
        clock: Clock,
        *,
        dry_run: bool = True,
        approval: ApprovalSettings | None = None,
        tell_admin_after_attempts: int = 3,
    ) -> None:
        self.store = store
        self.executors = list(executors)
        self.notifier = notifier
        self.clock = clock
        self.dry_run = dry_run
        #: Which steps need an approval; None: none do (and nothing is asked).
        self.approval = approval
        #: A failed action is reported to the admins when its attempts reach this (once).
        self.tell_admin_after_attempts = tell_admin_after_attempts

    def run(self, decisions: Sequence[Decision], workloads: Mapping[str, Workload]) -> list[ActionResult]:
        """Carry out every acting decision; one failure never stops the others. Steps held
        awaiting approval are asked for (once per request). A ``StoreError`` stops the run and
        is raised: no action runs without its record."""
        return self._run(decisions, workloads, gate=True)

    def _run(
        self, decisions: Sequence[Decision], workloads: Mapping[str, Workload], *, gate: bool
    ) -> list[ActionResult]:
        results: list[ActionResult] = []
        for decision in decisions:
            asks = decision.hold is Hold.AWAITING_APPROVAL and bool(decision.idempotency_key)
            if not decision.acts and not asks:
                continue
            workload = workloads.get(decision.workload_id)
            if workload is None:
                continue
            context = log_context(
                workload=decision.workload_id,
                rule=decision.rule,
                action=decision.step,
                key=decision.idempotency_key,
            )
            try:
                with context:
                    if asks:
                        self._ask_approval(decision, workload)
                        continue
                    result = self._one(decision, workload, gate=gate)
                    if result is not None:  # one line per action, for a log store to index
                        log.info("%s %s: %s", decision.step, result.status.value, result.detail)
            except StoreError:
                # Without its record no action may run: stop acting this tick, and fail the tick
                # so that its ladders are not saved either (the same steps come again, same keys).
                log.warning("state store failed; no further actions this tick")
                raise
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
        # A retry repeats an action whose approval (if it needed one) was used when it first ran.
        return self._run(decisions, workloads, gate=False)

    def executor_for(self, workload: Workload, level: Level) -> Executor | None:
        return next((e for e in self.executors if e.supports(workload, level)), None)

    # -- approvals ----------------------------------------------------------------------------
    def _needs_approval(self, decision: Decision) -> bool:
        return not self.dry_run and needs_approval(self.approval, decision)

    def _latest_approval(self, decision: Decision) -> tuple[ApprovalRecord, int] | None:
        found = self.store.latest_approvals([decision.workload_id], dry_run=self.dry_run)
        return found.get(decision.idempotency_key)

    def _ask_approval(self, decision: Decision, workload: Workload) -> None:
        """A new request when there is none in force (none yet, or the last one expired)."""
        if self.approval is None or self.dry_run:
            return
        now = self.clock.now()
        latest = self._latest_approval(decision)
        if latest is not None:
            record = latest[0]
            live = (
                record.status in (ApprovalStatus.PENDING, ApprovalStatus.APPROVED) and record.expires_at > now
            )
            if live or record.status in (ApprovalStatus.REJECTED, ApprovalStatus.USED):
                return
        attempt = 1 if latest is None else latest[1] + 1
        asked = replace(decision, idempotency_key=approval_key(decision.idempotency_key, attempt))
        ttl = timedelta(hours=self.approval.expire_hours)
        record = self.store.request_approval(asked, dry_run=False, at=now, ttl=ttl)
        notice = approval_notice(record, workload, decision)
        self.store.record_notice(notice, sent=self._deliver(notice))

    def _use_approval(self, decision: Decision, now: datetime) -> str:
        """Mark the step's approval used; the reason it cannot run, or ``""`` when it may."""
        latest = self._latest_approval(decision)
        if latest is None:
            return f"{decision.step} needs an approval and none was given"
        record = latest[0]
        if record.status is ApprovalStatus.USED:
            return ""  # used when this step first ran; the action row decides what happens now
        try:
            self.store.use_approval(record.id, now)
        except ControlError as e:
            return str(e)
        return ""

    def deliver(self, notice: Notice) -> bool:
        return self._deliver(notice)

    def _deliver(self, notice: Notice) -> bool:
        """Send ``notice``; False when a throttling notifier held it back for a digest."""
        deliver = getattr(self.notifier, "deliver", None)
        if callable(deliver):
            return bool(deliver(notice))
        self.notifier.send(notice)
        return True

    # -- actions ------------------------------------------------------------------------------
    def _one(self, decision: Decision, workload: Workload, *, gate: bool = True) -> ActionResult | None:
        now = self.clock.now()
        if gate and self._needs_approval(decision):
            refused = self._use_approval(decision, now)
            if refused:
                detail = f"not run: {refused}"
                return ActionResult(decision, ActionStatus.SKIPPED, detail, hold=Hold.AWAITING_APPROVAL)
        action = self.store.plan_action(decision, dry_run=self.dry_run, at=now)
        if action is None:
            return None  # this step already ran, is running, or waits for its retry time
        if self.dry_run:
            detail = f"dry-run: would {decision.step} ({decision.level.label})"
            note = AuditNote("action.dry_run", {"key": decision.idempotency_key, "detail": detail})
            self.store.finish_action(action.id, ActionStatus.SKIPPED, detail, now, audit=note)
            if decision.level is Level.NOTIFY:
                self.store.record_notice(notice_for(decision, workload, dry_run=True), sent=False)
            return ActionResult(decision, ActionStatus.SKIPPED, detail, action.id)
        return self.carry_out(action, decision, workload)

    def carry_out(self, action: Action, decision: Decision, workload: Workload) -> ActionResult:
        """``planned`` | ``failed`` → executing → its outcome: the part of an action after planning
        (also used to finish actions a crashed agent left behind, see ``execution.reconcile``)."""
        now = self.clock.now()
        key = decision.idempotency_key
        # Each state change is stored with its audit record, in one transaction.
        self.store.start_action(
            action.id, now, audit=AuditNote("action.start", {"key": key, "step": decision.step})
        )
        due: datetime | None = None
        try:
            status, detail, due = self._execute(decision, workload)
        except PreflightFailed as e:
            status, detail = ActionStatus.SKIPPED, f"pre-flight: {e}"
        except ExecutionError as e:
            status, detail = ActionStatus.FAILED, str(e)
        except Exception as e:  # an executor bug must not stop the tick
            log.exception("executor crashed on %s", decision.idempotency_key)
            status, detail = ActionStatus.FAILED, f"executor crashed: {type(e).__name__}: {e}"
        done = self.clock.now()
        if due is not None:
            note = AuditNote("action.pending", {"key": key, "detail": detail, "due_at": due.isoformat()})
            self.store.pend_action(action.id, due, detail, done, audit=note)
            return ActionResult(decision, ActionStatus.EXECUTING, detail, action.id)
        note = AuditNote(f"action.{status.value}", {"key": key, "detail": detail})
        self.store.finish_action(action.id, status, detail, done, audit=note)
        if status is ActionStatus.FAILED and action.attempts + 1 == self.tell_admin_after_attempts:
            notice = failure_notice(decision, workload, action.attempts + 1, detail, done)
            self.store.record_notice(notice, sent=self._deliver(notice))
        return ActionResult(decision, status, detail, action.id)

    def _execute(self, decision: Decision, workload: Workload) -> tuple[ActionStatus, str, datetime | None]:
        """(status, detail, when its follow-up is due: None unless a two-phase stop began)."""
        if decision.level is Level.NOTIFY:
            notice = notice_for(decision, workload, dry_run=False)
            sent = self._deliver(notice)
            self.store.record_notice(notice, sent=sent)
            held = "" if sent else " (held back for the daily digest: notice limit reached)"
            return ActionStatus.SUCCEEDED, f"notified {workload.owner.user}{held}", None
        executor = self.executor_for(workload, decision.level)
        if executor is None:
            raise ExecutionError(f"no executor can {decision.step} a {workload.kind.value}")
        current = self._preflight(decision, workload, executor)
        # Tell the owner first, so the notice arrives even if the stop takes its whole grace.
        notice = notice_for(decision, current, dry_run=False)
        self.store.record_notice(notice, sent=self._deliver(notice))
        if decision.level is Level.GRACEFUL_STOP and isinstance(executor, StagedExecutor):
            outcome = executor.begin(decision, current)  # the grace runs on; a later tick completes it
        else:
            outcome = executor.execute(decision, current)
        if not outcome.ok:
            raise ExecutionError(outcome.detail)
        if outcome.follow_up_after_s is not None and not outcome.verified:
            due = self.clock.now() + timedelta(seconds=outcome.follow_up_after_s)
            return ActionStatus.EXECUTING, f"{outcome.detail}; follow-up due {due:%H:%M:%S} UTC", due
        verified = outcome.verified or executor.verify(decision, current)
        return ActionStatus.SUCCEEDED, settled(outcome.detail, verified), None

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


def settled(detail: str, verified: bool) -> str:
    """The detail of an action that ended with an executor's ``detail``."""
    suffix = "verified" if verified else "not yet verified; the ladder re-checks next tick"
    return f"{detail} ({suffix})"


def approval_notice(record: ApprovalRecord, workload: Workload, decision: Decision) -> Notice:
    """The admins' notice of a new approval request: what, why, and the commands to decide."""
    body = "\n\n".join(
        [
            f"gpusteward asks for approval to {decision.step} ({decision.level.label}) "
            f"{workload.kind.value} {workload.name} (id {workload.id}) of {workload.owner.user}.",
            decision.reason,
            f"Approve: gpusteward approvals approve {record.id}\n"
            f"Reject:  gpusteward approvals reject {record.id} --reason '...'",
            f"The request expires at {record.expires_at:%Y-%m-%d %H:%M} UTC; an expired approval "
            "never runs, and the step is asked again if the waste still holds.",
        ]
    )
    return Notice(
        at=record.requested_at,
        workload_id=workload.id,
        owner=None,
        subject=f"Approval needed ({record.id}): {decision.step} of {workload.name}",
        body=body,
        level=decision.level,
        dedup_key=record.idempotency_key,
    )


def failure_notice(decision: Decision, workload: Workload, attempts: int, error: str, at: datetime) -> Notice:
    """The admins' notice of an action that keeps failing (it is still retried while the waste holds)."""
    body = (
        f"gpusteward failed {attempts} times to {decision.step} ({decision.level.label}) "
        f"{workload.kind.value} {workload.name} (id {workload.id}) of {workload.owner.user}.\n\n"
        f"Last error: {error}\n\nIt is retried (1, 2, 4 ... 30 min apart) while the waste holds; "
        "`gpusteward audit` shows every attempt."
    )
    subject = f"Action failing: {decision.step} of {workload.name}"
    key = f"failed:{decision.idempotency_key}"
    return Notice(at, workload.id, None, subject, body, decision.level, key)
