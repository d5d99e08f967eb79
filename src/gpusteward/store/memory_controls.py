"""The action journal, approvals and snoozes of ``store.memory.MemoryStore``.

Same rules as the SQL mixins (``store.actions``, ``store.controls``): one action and one
approval request per idempotency key and mode, the same state moves and errors, and the same
audit record with every change. ``tests/store/test_ports_conformance.py`` holds them together.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from gpusteward.domain.errors import ControlError, StoreError
from gpusteward.domain.models import Action, ActionStatus, ApprovalStatus, Decision, Level
from gpusteward.domain.records import ApprovalRecord, AuditNote, SnoozeRecord, base_key
from gpusteward.domain.store_ports import moves_from, retry_backoff

_LIVE = (ApprovalStatus.PENDING, ApprovalStatus.APPROVED)


def last_n(items: Iterable[Any], limit: int) -> list[Any]:
    """The last ``limit`` of ``items`` (in id order), oldest first."""
    found = list(items)
    return found[-limit:] if limit > 0 else []


class MemoryJournal:
    """Actions, kept by id (ids count up, as SQL's do)."""

    @abstractmethod
    def audit(self, event: str, at: datetime, workload_id: str | None = None, **payload: Any) -> None: ...

    def __init__(self) -> None:
        self._actions: dict[int, Action] = {}
        self._action_keys: dict[tuple[bool, str], int] = {}

    def plan_action(self, decision: Decision, *, dry_run: bool, at: datetime) -> Action | None:
        if not decision.idempotency_key:
            raise ValueError(f"decision for {decision.workload_id} has no idempotency key: it does not act")
        found = self._action_keys.get((dry_run, decision.idempotency_key))
        if found is not None:
            a = self._actions[found]
            due = a.status is ActionStatus.FAILED and at >= a.updated_at + retry_backoff(a.attempts)
            return a if due else None
        action = Action(
            id=len(self._actions) + 1,
            idempotency_key=decision.idempotency_key,
            workload_id=decision.workload_id,
            level=decision.level,
            step=decision.step,
            rule=decision.rule,
            status=ActionStatus.PLANNED,
            dry_run=dry_run,
            created_at=at,
            updated_at=at,
            gpu_uuids=tuple(decision.gpu_uuids),
        )
        self._actions[action.id] = action
        self._action_keys[(dry_run, action.idempotency_key)] = action.id
        return action

    def start_action(self, action_id: int, at: datetime, *, audit: AuditNote | None = None) -> Action:
        return self._move(
            action_id, moves_from("start"), "start", audit, at, status=ActionStatus.EXECUTING, due_at=None
        )

    def pend_action(
        self, action_id: int, due_at: datetime, detail: str, at: datetime, *, audit: AuditNote | None = None
    ) -> Action:
        return self._move(
            action_id, moves_from("pend"), "pend", audit, at, due_at=due_at, detail=detail[:4000]
        )

    def finish_action(
        self,
        action_id: int,
        status: ActionStatus,
        detail: str,
        at: datetime,
        *,
        audit: AuditNote | None = None,
    ) -> Action:
        return self._move(
            action_id, moves_from("finish", status), "finish", audit, at, status=status, detail=detail[:4000]
        )

    def _move(
        self,
        action_id: int,
        allowed: tuple[ActionStatus, ...],
        verb: str,
        audit: AuditNote | None,
        at: datetime,
        **changes: Any,
    ) -> Action:
        a = self._actions.get(action_id)
        if a is None:
            raise StoreError(f"{verb} action {action_id}: no such action")
        if a.status not in allowed:
            states = " or ".join(s.value for s in allowed)
            raise StoreError(f"{verb} action {action_id}: it is {a.status.value}, not {states}")
        attempts = a.attempts + 1 if verb == "start" else a.attempts
        a = self._actions[action_id] = replace(a, updated_at=at, attempts=attempts, **changes)
        if audit is not None:
            self.audit(audit.event, at, a.workload_id, **audit.payload)
        return a

    def _where(self, dry_run: bool, *statuses: ActionStatus) -> list[Action]:
        return [a for a in self._actions.values() if a.dry_run == dry_run and a.status in statuses]

    def retries_due(self, at: datetime, *, dry_run: bool) -> list[Action]:
        failed = self._where(dry_run, ActionStatus.FAILED)
        return [a for a in failed if at >= a.updated_at + retry_backoff(a.attempts)]

    def followups_due(self, at: datetime, *, dry_run: bool) -> list[Action]:
        executing = self._where(dry_run, ActionStatus.EXECUTING)
        return [a for a in executing if a.due_at is not None and a.due_at <= at]

    def unfinished_actions(self, *, dry_run: bool) -> list[Action]:
        open_ = self._where(dry_run, ActionStatus.PLANNED, ActionStatus.EXECUTING)
        return [a for a in open_ if a.due_at is None]

    def count_actions_since(
        self, at: datetime, min_level: Level = Level.GRACEFUL_STOP, *, dry_run: bool = False
    ) -> tuple[int, int]:
        # Dry-run actions are all recorded as skipped; real skipped ones touched nothing.
        counted = [
            a
            for a in self._actions.values()
            if a.created_at >= at
            and a.level >= min_level
            and a.dry_run == dry_run
            and (dry_run or a.status is not ActionStatus.SKIPPED)
        ]
        return len(counted), sum(len(a.gpu_uuids) for a in counted)

    def actions(self, limit: int = 50, workload_id: str | None = None) -> list[Action]:
        mine = (a for a in self._actions.values() if workload_id is None or a.workload_id == workload_id)
        return last_n(mine, limit)


class MemoryControls:
    """The kill switch, approval requests and snoozes."""

    @abstractmethod
    def audit(self, event: str, at: datetime, workload_id: str | None = None, **payload: Any) -> None: ...

    def __init__(self) -> None:
        self._paused = False
        self._approvals: dict[int, ApprovalRecord] = {}
        self._approval_keys: dict[tuple[bool, str], int] = {}
        self._snoozes: dict[int, SnoozeRecord] = {}

    def is_paused(self) -> bool:
        return self._paused

    def set_paused(self, paused: bool, *, by: str, reason: str, at: datetime) -> None:
        self._paused = paused
        self.audit("paused" if paused else "resumed", at, None, by=by, reason=reason)

    # -- approvals ----------------------------------------------------------------------------
    def request_approval(
        self, decision: Decision, *, dry_run: bool, at: datetime, ttl: timedelta
    ) -> ApprovalRecord:
        if not decision.idempotency_key:
            raise ValueError(f"decision for {decision.workload_id} has no idempotency key: it does not act")
        found = self._approval_keys.get((dry_run, decision.idempotency_key))
        if found is not None:
            return self._approvals[found]
        record = ApprovalRecord(
            id=len(self._approvals) + 1,
            idempotency_key=decision.idempotency_key,
            dry_run=dry_run,
            workload_id=decision.workload_id,
            level=decision.level,
            step=decision.step,
            rule=decision.rule,
            reason=decision.reason,
            gpu_uuids=tuple(decision.gpu_uuids),
            status=ApprovalStatus.PENDING,
            requested_at=at,
            expires_at=at + ttl,
        )
        self._approvals[record.id] = record
        self._approval_keys[(dry_run, record.idempotency_key)] = record.id
        payload = {"approval_id": record.id, "key": record.idempotency_key, "step": record.step}
        self.audit("approval.requested", at, record.workload_id, **payload)
        return record

    def approval(self, approval_id: int) -> ApprovalRecord | None:
        return self._approvals.get(approval_id)

    def approvals(
        self, status: ApprovalStatus | None = None, *, dry_run: bool | None = None, limit: int = 100
    ) -> list[ApprovalRecord]:
        found = (
            r
            for r in self._approvals.values()
            if (status is None or r.status is status) and (dry_run is None or r.dry_run == dry_run)
        )
        return last_n(found, limit)

    def latest_approvals(
        self, workload_ids: Iterable[str], *, dry_run: bool
    ) -> dict[str, tuple[ApprovalRecord, int]]:
        ids = set(workload_ids)
        out: dict[str, tuple[ApprovalRecord, int]] = {}
        for r in self._approvals.values():
            if r.workload_id in ids and r.dry_run == dry_run:
                key = base_key(r.idempotency_key)
                out[key] = (r, out[key][1] + 1 if key in out else 1)
        return out

    def _set(self, record: ApprovalRecord, **changes: Any) -> ApprovalRecord:
        record = self._approvals[record.id] = replace(record, **changes)
        return record

    def _expire(self, r: ApprovalRecord, at: datetime) -> ApprovalRecord:
        payload = {"approval_id": r.id, "key": r.idempotency_key, "was": r.status.value}
        self.audit("approval.expired", at, r.workload_id, **payload)
        return self._set(r, status=ApprovalStatus.EXPIRED)

    def decide_approval(
        self, approval_id: int, *, approve: bool, by: str, reason: str, at: datetime
    ) -> ApprovalRecord:
        if not by.strip():
            raise ControlError("an approval decision needs the name of who made it")
        if not approve and not reason.strip():
            raise ControlError("a rejection needs a reason (the owner and the audit log see it)")
        r = self._approvals.get(approval_id)
        if r is None:
            raise ControlError(f"no approval request {approval_id}")
        if r.status is not ApprovalStatus.PENDING:
            raise ControlError(f"approval request {approval_id} is {r.status.value}, not pending")
        payload = {"approval_id": approval_id, "key": r.idempotency_key, "by": by, "reason": reason}
        if at >= r.expires_at:
            self._set(r, status=ApprovalStatus.EXPIRED)
            self.audit("approval.expired", at, r.workload_id, **payload)
            raise ControlError(
                f"approval request {approval_id} expired at {r.expires_at:%Y-%m-%d %H:%M} UTC; "
                "it will be asked again if the waste still holds"
            )
        status = ApprovalStatus.APPROVED if approve else ApprovalStatus.REJECTED
        self.audit(f"approval.{status.value}", at, r.workload_id, **payload)
        return self._set(r, status=status, decided_by=by, decided_at=at, decision_reason=reason)

    def use_approval(self, approval_id: int, at: datetime) -> ApprovalRecord:
        r = self._approvals.get(approval_id)
        if r is None:
            raise ControlError(f"no approval request {approval_id}")
        if r.status is not ApprovalStatus.APPROVED:
            raise ControlError(f"approval request {approval_id} is {r.status.value}, not approved")
        if at >= r.expires_at:
            self._expire(r, at)
            raise ControlError(f"approval request {approval_id} expired at {r.expires_at:%Y-%m-%d %H:%M} UTC")
        return self._set(r, status=ApprovalStatus.USED)

    def expire_approvals(self, at: datetime) -> list[ApprovalRecord]:
        due = [r for r in self._approvals.values() if r.status in _LIVE and r.expires_at <= at]
        return [self._expire(r, at) for r in due]

    # -- snoozes ------------------------------------------------------------------------------
    def snooze(
        self, workload_id: str, *, until: datetime, by: str, reason: str, at: datetime
    ) -> SnoozeRecord:
        if until <= at:
            raise ControlError(f"a snooze must end in the future, not at {until:%Y-%m-%d %H:%M} UTC")
        if not by.strip():
            raise ControlError("a snooze needs the name of who asked for it")
        self._end_snoozes(workload_id, at)
        record = SnoozeRecord(len(self._snoozes) + 1, workload_id, at, until, by, reason)
        self._snoozes[record.id] = record
        self.audit("snooze.set", at, workload_id, until=until.isoformat(), by=by, reason=reason)
        return record

    def unsnooze(self, workload_id: str, *, by: str, at: datetime) -> bool:
        ended = self._end_snoozes(workload_id, at)
        if ended:
            self.audit("snooze.lifted", at, workload_id, by=by)
        return ended

    def _end_snoozes(self, workload_id: str, at: datetime) -> bool:
        live = [
            s
            for s in self._snoozes.values()
            if s.workload_id == workload_id and s.ended_at is None and s.until > at
        ]
        for s in live:
            self._snoozes[s.id] = replace(s, ended_at=at)
        return bool(live)

    def active_snoozes(self, at: datetime) -> dict[str, SnoozeRecord]:
        return {s.workload_id: s for s in self._snoozes.values() if s.active(at)}

    def snoozes(self, workload_id: str | None = None, limit: int = 100) -> list[SnoozeRecord]:
        mine = (s for s in self._snoozes.values() if workload_id is None or s.workload_id == workload_id)
        return last_n(mine, limit)
