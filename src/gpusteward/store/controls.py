"""Owner and admin controls in the state store: approval requests and snoozes.

A mixin of ``StateStore`` (it uses the store's transactions and audit appends), kept apart so
the store module stays about the loop's own state. Every change is audited in the same
transaction as the change itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from gpusteward.domain.errors import ControlError, StoreError
from gpusteward.domain.models import ApprovalStatus, Decision
from gpusteward.domain.records import ApprovalRecord, SnoozeRecord, base_key
from gpusteward.store.dbschema import approvals_t, snoozes_t
from gpusteward.store.rows import approval_of, chunks, snooze_of
from gpusteward.store.sql_parts import SqlParts

__all__ = ["ApprovalRecord", "OwnerControls", "SnoozeRecord"]


class OwnerControls(SqlParts):
    """Approvals and snoozes; mixed into ``StateStore``."""

    # -- approvals ----------------------------------------------------------------------------
    def request_approval(
        self, decision: Decision, *, dry_run: bool, at: datetime, ttl: timedelta
    ) -> ApprovalRecord:
        """The approval request for this decision's step: the stored one (whatever its state),
        or a new ``pending`` one that expires after ``ttl``. One per idempotency key and mode."""
        if not decision.idempotency_key:
            raise ValueError(f"decision for {decision.workload_id} has no idempotency key: it does not act")
        c = approvals_t.c
        key = (c.dry_run == dry_run, c.idempotency_key == decision.idempotency_key)
        try:
            with self._tx("request approval") as conn:
                row = conn.execute(select(approvals_t).where(*key)).first()
                if row is not None:
                    return approval_of(row)
                values = {
                    "idempotency_key": decision.idempotency_key,
                    "dry_run": dry_run,
                    "workload_id": decision.workload_id,
                    "level": int(decision.level),
                    "step": decision.step,
                    "rule": decision.rule,
                    "reason": decision.reason,
                    "gpu_uuids": list(decision.gpu_uuids),
                    "status": ApprovalStatus.PENDING.value,
                    "requested_at": at,
                    "expires_at": at + ttl,
                }
                conn.execute(insert(approvals_t).values(values))
                row = conn.execute(select(approvals_t).where(*key)).one()
                self._audit_in(
                    conn,
                    "approval.requested",
                    at,
                    decision.workload_id,
                    {"approval_id": row.id, "key": decision.idempotency_key, "step": decision.step},
                )
                return approval_of(row)
        except StoreError as e:
            if not isinstance(e.__cause__, IntegrityError):
                raise
            # Another replica asked first: its request is ours.
            with self._tx("read approval") as conn:
                return approval_of(conn.execute(select(approvals_t).where(*key)).one())

    def approval(self, approval_id: int) -> ApprovalRecord | None:
        with self._tx("read approval") as conn:
            row = conn.execute(select(approvals_t).where(approvals_t.c.id == approval_id)).first()
        return None if row is None else approval_of(row)

    def approvals(
        self, status: ApprovalStatus | None = None, *, dry_run: bool | None = None, limit: int = 100
    ) -> list[ApprovalRecord]:
        """The last ``limit`` approval requests (in one state, of one mode), oldest first."""
        c = approvals_t.c
        query = select(approvals_t).order_by(c.id.desc()).limit(limit)
        if status is not None:
            query = query.where(c.status == status.value)
        if dry_run is not None:
            query = query.where(c.dry_run == dry_run)
        with self._tx("read approvals") as conn:
            rows = conn.execute(query).all()
        return [approval_of(r) for r in reversed(rows)]

    def latest_approvals(
        self, workload_ids: Iterable[str], *, dry_run: bool
    ) -> dict[str, tuple[ApprovalRecord, int]]:
        """Action key → (its latest approval request, how many requests it had), for these workloads."""
        c = approvals_t.c
        out: dict[str, tuple[ApprovalRecord, int]] = {}
        with self._tx("read approvals") as conn:
            for chunk in chunks(sorted(set(workload_ids))):
                query = select(approvals_t).where(c.workload_id.in_(chunk), c.dry_run == dry_run)
                for r in conn.execute(query.order_by(c.id)):
                    key = base_key(r.idempotency_key)
                    count = out[key][1] + 1 if key in out else 1
                    out[key] = (approval_of(r), count)
        return out

    def decide_approval(
        self, approval_id: int, *, approve: bool, by: str, reason: str, at: datetime
    ) -> ApprovalRecord:
        """pending → approved | rejected, by a named person with a reason.

        Raises ``ControlError`` for an unknown, already decided or expired request (an expired
        one is marked expired on the way)."""
        if not by.strip():
            raise ControlError("an approval decision needs the name of who made it")
        if not approve and not reason.strip():
            raise ControlError("a rejection needs a reason (the owner and the audit log see it)")
        c = approvals_t.c
        with self._tx(f"decide approval {approval_id}") as conn:
            row = conn.execute(select(approvals_t).where(c.id == approval_id)).first()
            if row is None:
                raise ControlError(f"no approval request {approval_id}")
            if row.status != ApprovalStatus.PENDING.value:
                raise ControlError(f"approval request {approval_id} is {row.status}, not pending")
            expired = at >= row.expires_at
            status = (
                ApprovalStatus.EXPIRED
                if expired
                else ApprovalStatus.APPROVED
                if approve
                else ApprovalStatus.REJECTED
            )
            values: dict[str, Any] = {"status": status.value}
            if not expired:
                values.update(decided_by=by, decided_at=at, decision_reason=reason)
            conn.execute(update(approvals_t).where(c.id == approval_id).values(values))
            payload = {"approval_id": approval_id, "key": row.idempotency_key, "by": by, "reason": reason}
            self._audit_in(conn, f"approval.{status.value}", at, row.workload_id, payload)
        if expired:
            raise ControlError(
                f"approval request {approval_id} expired at {row.expires_at:%Y-%m-%d %H:%M} UTC; "
                "it will be asked again if the waste still holds"
            )
        found = self.approval(approval_id)
        assert found is not None
        return found

    def expire_approvals(self, at: datetime) -> list[ApprovalRecord]:
        """Mark every pending or approved-but-unused request past its expiry as expired."""
        c = approvals_t.c
        live = [ApprovalStatus.PENDING.value, ApprovalStatus.APPROVED.value]
        with self._tx("expire approvals") as conn:
            rows = conn.execute(select(approvals_t).where(c.status.in_(live), c.expires_at <= at)).all()
            for r in rows:
                moved = conn.execute(
                    update(approvals_t)
                    .where(c.id == r.id, c.status == r.status)
                    .values(status=ApprovalStatus.EXPIRED.value)
                ).rowcount
                if moved:
                    payload = {"approval_id": r.id, "key": r.idempotency_key, "was": r.status}
                    self._audit_in(conn, "approval.expired", at, r.workload_id, payload)
        return [self.approval(r.id) or approval_of(r) for r in rows]

    def use_approval(self, approval_id: int, at: datetime) -> ApprovalRecord:
        """approved → used, right before its action runs; an expired approval never runs.

        Raises ``ControlError`` when the request is not approved or has expired."""
        c = approvals_t.c
        with self._tx(f"use approval {approval_id}") as conn:
            row = conn.execute(select(approvals_t).where(c.id == approval_id)).first()
            if row is None:
                raise ControlError(f"no approval request {approval_id}")
            if row.status != ApprovalStatus.APPROVED.value:
                raise ControlError(f"approval request {approval_id} is {row.status}, not approved")
            if at >= row.expires_at:
                conn.execute(
                    update(approvals_t).where(c.id == approval_id).values(status=ApprovalStatus.EXPIRED.value)
                )
                payload = {"approval_id": approval_id, "key": row.idempotency_key, "was": row.status}
                self._audit_in(conn, "approval.expired", at, row.workload_id, payload)
                expired_at = row.expires_at
            else:
                expired_at = None
                conn.execute(
                    update(approvals_t).where(c.id == approval_id).values(status=ApprovalStatus.USED.value)
                )
        if expired_at is not None:
            raise ControlError(f"approval request {approval_id} expired at {expired_at:%Y-%m-%d %H:%M} UTC")
        found = self.approval(approval_id)
        assert found is not None
        return found

    # -- snoozes ------------------------------------------------------------------------------
    def snooze(
        self, workload_id: str, *, until: datetime, by: str, reason: str, at: datetime
    ) -> SnoozeRecord:
        """Leave a workload alone until ``until``; replaces its active snooze. Limits (how long,
        which rules may be snoozed, whether the workload exists) are checked by the caller."""
        if until <= at:
            raise ControlError(f"a snooze must end in the future, not at {until:%Y-%m-%d %H:%M} UTC")
        if not by.strip():
            raise ControlError("a snooze needs the name of who asked for it")
        c = snoozes_t.c
        with self._tx(f"snooze {workload_id}") as conn:
            conn.execute(
                update(snoozes_t)
                .where(c.workload_id == workload_id, c.ended_at.is_(None), c.until > at)
                .values(ended_at=at)
            )
            values = {
                "workload_id": workload_id,
                "created_at": at,
                "until": until,
                "by": by,
                "reason": reason,
            }
            conn.execute(insert(snoozes_t).values(values))
            row = conn.execute(
                select(snoozes_t).where(c.workload_id == workload_id).order_by(c.id.desc()).limit(1)
            ).one()
            payload = {"until": until.isoformat(), "by": by, "reason": reason}
            self._audit_in(conn, "snooze.set", at, workload_id, payload)
        return snooze_of(row)

    def unsnooze(self, workload_id: str, *, by: str, at: datetime) -> bool:
        """End the workload's active snooze now; False when it had none."""
        c = snoozes_t.c
        with self._tx(f"unsnooze {workload_id}") as conn:
            ended = conn.execute(
                update(snoozes_t)
                .where(c.workload_id == workload_id, c.ended_at.is_(None), c.until > at)
                .values(ended_at=at)
            ).rowcount
            if ended:
                self._audit_in(conn, "snooze.lifted", at, workload_id, {"by": by})
        return bool(ended)

    def active_snoozes(self, at: datetime) -> dict[str, SnoozeRecord]:
        """Workload id → its snooze in force at ``at``."""
        c = snoozes_t.c
        query = select(snoozes_t).where(c.ended_at.is_(None), c.created_at <= at, c.until > at).order_by(c.id)
        with self._tx("read snoozes") as conn:
            return {r.workload_id: snooze_of(r) for r in conn.execute(query)}

    def snoozes(self, workload_id: str | None = None, limit: int = 100) -> list[SnoozeRecord]:
        """The last ``limit`` snoozes (of one workload), oldest first."""
        c = snoozes_t.c
        query = select(snoozes_t).order_by(c.id.desc()).limit(limit)
        if workload_id is not None:
            query = query.where(c.workload_id == workload_id)
        with self._tx("read snoozes") as conn:
            rows = conn.execute(query).all()
        return [snooze_of(r) for r in reversed(rows)]
