"""Owner and admin controls with their checks: snooze a workload, decide an approval request.

The CLI (``gpusteward snooze``, ``gpusteward approvals``) and the web app call these; the store
records the result and its audit entry in one transaction. Every refusal is a ``ControlError``
with a sentence that says why.

A workload counts as *finished* when the loop has not seen it for ``FINISHED_AFTER`` (15 min,
about 30 ticks at the default 30 s): snoozing it or deciding its approvals means nothing then.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from gpusteward.analysis.rules import CompiledRule
from gpusteward.domain.errors import ControlError
from gpusteward.policy.settings import PolicySettings
from gpusteward.store.controls import ApprovalRecord, SnoozeRecord
from gpusteward.store.db import StateStore, WorkloadRecord

#: Not seen by the loop for this long: finished (or the agent is down, which is no time to act).
FINISHED_AFTER = timedelta(minutes=15)


def running_workload(store: StateStore, workload_id: str, now: datetime) -> WorkloadRecord:
    """The workload's last snapshot; ``ControlError`` when it is unknown or finished."""
    info = store.workload_info(workload_id)
    if info is None:
        raise ControlError(f"no workload {workload_id!r} is known to gpusteward (see `gpusteward explain`)")
    if now - info.last_seen_at > FINISHED_AFTER:
        ago = int((now - info.last_seen_at).total_seconds() // 60)
        raise ControlError(
            f"workload {workload_id} was last seen {ago} min ago ({info.last_seen_at:%Y-%m-%d %H:%M} UTC): "
            f"it has finished (or gpusteward is not running), so there is nothing to control"
        )
    return info


def snooze_workload(
    store: StateStore,
    policy: PolicySettings,
    rules: Sequence[CompiledRule],
    workload_id: str,
    *,
    hours: float,
    by: str,
    reason: str,
    now: datetime,
) -> SnoozeRecord:
    """Leave a running workload alone for ``hours`` (at most ``policy.snooze.max_hours``).

    Refused for an unknown or finished workload, a length out of bounds, and a workload with an
    open finding of a rule admins marked ``snoozable: false``."""
    limit = policy.snooze.max_hours
    if not hours > 0:
        raise ControlError(f"a snooze lasts more than 0 hours, not {hours:g}")
    if hours > limit:
        raise ControlError(f"a snooze lasts at most {limit:g} h (policy.snooze.max_hours), not {hours:g} h")
    running_workload(store, workload_id, now)
    fixed = {r.name for r in rules if not r.spec.snoozable}
    blocking = sorted(
        {
            e.finding.rule
            for e in store.findings_for(workload_id)
            if e.ended_at is None and e.finding.rule in fixed
        }
    )
    if blocking:
        raise ControlError(
            f"workload {workload_id} has an open finding of {', '.join(blocking)}, which admins made "
            "non-snoozable (snoozable: false); ask them instead"
        )
    return store.snooze(workload_id, until=now + timedelta(hours=hours), by=by, reason=reason, at=now)


def decide_approval(
    store: StateStore, approval_id: int, *, approve: bool, by: str, reason: str, now: datetime
) -> ApprovalRecord:
    """Approve or reject a pending request; ``ControlError`` for an unknown, decided or expired
    request, or one whose workload has finished."""
    record = store.approval(approval_id)
    if record is None:
        raise ControlError(f"no approval request {approval_id}")
    running_workload(store, record.workload_id, now)
    return store.decide_approval(approval_id, approve=approve, by=by, reason=reason, at=now)
