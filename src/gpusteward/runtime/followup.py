"""The second phase of two-phase graceful stops: finishing the ones whose grace is over.

``ActionRunner`` leaves a begun L2 stop ``executing`` with ``due_at`` (see ``execution.base``).
Each tick, before new decisions, the runtime calls ``follow_up``: for every such action that is
due, the executor's ``complete`` ends what still runs (SIGTERM, ``scancel``) and verifies, and the
row moves to ``succeeded`` or ``failed`` (then retried with backoff, and the ladder's force step
applies as usual). Nothing here waits for a grace. A follow-up is recorded by moving its row to
a final state; a crash before that repeats only ``complete``, which is safe to repeat (a second
SIGTERM to a process, or nothing to a process or job that is gone). Pending rows survive a
restart as they are (``execution.reconcile`` leaves them alone) and complete here when due.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from gpusteward.domain.errors import ExecutionError
from gpusteward.domain.models import Action, ActionStatus, Decision, Workload
from gpusteward.domain.ports import StagedExecutor
from gpusteward.domain.records import AuditNote
from gpusteward.runtime.runner import ActionResult, ActionRunner, settled

log = logging.getLogger(__name__)


def follow_up(runner: ActionRunner, now: datetime, workloads: Mapping[str, Workload]) -> list[ActionResult]:
    """Complete every two-phase stop due at ``now``. Held while the kill switch is on."""
    if runner.dry_run:
        return []  # a dry run begins nothing
    due = runner.store.followups_due(now, dry_run=False)
    if not due or runner.store.is_paused():
        return []
    return [_complete(runner, action, workloads.get(action.workload_id)) for action in due]


def _decision(action: Action) -> Decision:
    return Decision(
        workload_id=action.workload_id,
        at=action.created_at,
        level=action.level,
        step=action.step,
        reason=f"follow-up of {action.step}: {action.detail}",
        rule=action.rule,
        gpu_uuids=action.gpu_uuids,
        idempotency_key=action.idempotency_key,
    )


def _complete(runner: ActionRunner, action: Action, workload: Workload | None) -> ActionResult:
    decision = _decision(action)
    status, done = _outcome(runner, decision, workload)
    detail = f"{action.detail}; then {done}"  # what began it, then how it ended
    at = runner.clock.now()
    note = AuditNote(f"action.{status.value}", {"key": action.idempotency_key, "detail": detail})
    runner.store.finish_action(action.id, status, detail, at, audit=note)
    return ActionResult(decision, status, detail, action.id)


def _outcome(runner: ActionRunner, decision: Decision, workload: Workload | None) -> tuple[ActionStatus, str]:
    if workload is None:
        # As in reconciliation: a workload the source no longer lists has ended.
        return ActionStatus.SUCCEEDED, "it ended within the grace: gone from the source (verified)"
    executor = runner.executor_for(workload, decision.level)
    if not isinstance(executor, StagedExecutor):
        return ActionStatus.FAILED, f"no executor can complete {decision.step} of a {workload.kind.value}"
    try:
        outcome = executor.complete(decision, workload)
        if not outcome.ok:
            raise ExecutionError(outcome.detail)
        verified = outcome.verified or executor.verify(decision, workload)
    except ExecutionError as e:
        return ActionStatus.FAILED, str(e)
    except Exception as e:  # an executor bug must not stop the tick
        log.exception("executor crashed completing %s", decision.idempotency_key)
        return ActionStatus.FAILED, f"executor crashed: {type(e).__name__}: {e}"
    return ActionStatus.SUCCEEDED, settled(outcome.detail, verified)
