"""The action log in the state store: planned → executing → succeeded | failed | skipped.

A mixin of ``StateStore`` (its transactions and audit appends), kept apart so the store module
stays about the loop's own state. A state change and its audit record are written in one
transaction (``AuditNote``): a crash or a failed write leaves both or neither, so ``audit
verify`` can require a record for every state an action reached (``store.audit_complete``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import IntegrityError

from gpusteward.domain.errors import StoreError
from gpusteward.domain.models import Action, ActionStatus, Decision, Level
from gpusteward.domain.records import AuditNote
from gpusteward.domain.store_ports import moves_from
from gpusteward.domain.store_ports import retry_backoff as backoff
from gpusteward.store.dbschema import actions_t
from gpusteward.store.rows import action_of
from gpusteward.store.sql_parts import SqlParts

__all__ = ["ActionLog", "AuditNote", "inserted_id"]


def inserted_id(result: CursorResult[Any]) -> int:
    pk = result.inserted_primary_key
    if pk is None:  # only for statements that are not single-row inserts
        raise StoreError("insert returned no primary key")
    return int(pk[0])


class ActionLog(SqlParts):
    """``StateStore``'s actions, with their audit records."""

    def plan_action(self, decision: Decision, *, dry_run: bool, at: datetime) -> Action | None:
        """A new ``planned`` action, a failed one whose retry is due, or ``None``: never twice."""
        if not decision.idempotency_key:
            raise ValueError(f"decision for {decision.workload_id} has no idempotency key: it does not act")
        c = actions_t.c
        try:
            with self._tx("plan action") as conn:
                key = (c.dry_run == dry_run, c.idempotency_key == decision.idempotency_key)
                row = conn.execute(select(actions_t).where(*key)).first()
                if row is not None:
                    failed = row.status == ActionStatus.FAILED.value
                    due = failed and at >= row.updated_at + backoff(row.attempts)
                    return action_of(row) if due else None
                values = {
                    "idempotency_key": decision.idempotency_key,
                    "dry_run": dry_run,
                    "workload_id": decision.workload_id,
                    "level": int(decision.level),
                    "step": decision.step,
                    "rule": decision.rule,
                    "status": ActionStatus.PLANNED.value,
                    "created_at": at,
                    "updated_at": at,
                    "attempts": 0,
                    "detail": "",
                    "gpu_uuids": list(decision.gpu_uuids),
                    "gpu_count": len(decision.gpu_uuids),
                }
                new_id = inserted_id(conn.execute(insert(actions_t).values(values)))
                return action_of(conn.execute(select(actions_t).where(c.id == new_id)).one())
        except StoreError as e:
            if isinstance(e.__cause__, IntegrityError):
                return None  # another replica planned the same key first
            raise

    def retries_due(self, at: datetime, *, dry_run: bool) -> list[Action]:
        """Failed actions whose backoff has passed: policy emits each step once, so the runtime
        retries these (``start_action`` → execute → ``finish_action``) while they still apply."""
        c = actions_t.c
        query = select(actions_t).where(c.status == ActionStatus.FAILED.value, c.dry_run == dry_run)
        with self._tx("read failed actions") as conn:
            rows = conn.execute(query.order_by(c.id)).all()
        return [action_of(r) for r in rows if at >= r.updated_at + backoff(r.attempts)]

    def unfinished_actions(self, *, dry_run: bool) -> list[Action]:
        """Actions left ``planned`` or ``executing``: after a crash, the ones to reconcile. An
        ``executing`` one with ``due_at`` is a two-phase stop under way, finished by its follow-up."""
        c = actions_t.c
        states = [ActionStatus.PLANNED.value, ActionStatus.EXECUTING.value]
        query = select(actions_t).where(c.status.in_(states), c.dry_run == dry_run, c.due_at.is_(None))
        with self._tx("read unfinished actions") as conn:
            return [action_of(r) for r in conn.execute(query.order_by(c.id))]

    def start_action(self, action_id: int, at: datetime, *, audit: AuditNote | None = None) -> Action:
        """planned | failed → executing, counting one more attempt (and ``audit`` recorded with it)."""
        values = {
            "status": ActionStatus.EXECUTING.value,
            "attempts": actions_t.c.attempts + 1,
            "updated_at": at,
            "due_at": None,
        }
        return self._move(action_id, moves_from("start"), values, "start", audit)

    def pend_action(
        self, action_id: int, due_at: datetime, detail: str, at: datetime, *, audit: AuditNote | None = None
    ) -> Action:
        """executing → executing with ``due_at``: a two-phase stop is under way, its follow-up due then."""
        values = {"due_at": due_at, "detail": detail[:4000], "updated_at": at}
        return self._move(action_id, moves_from("pend"), values, "pend", audit)

    def followups_due(self, at: datetime, *, dry_run: bool) -> list[Action]:
        """``executing`` actions whose follow-up (``due_at``) has come, oldest first."""
        c = actions_t.c
        query = select(actions_t).where(
            c.status == ActionStatus.EXECUTING.value, c.dry_run == dry_run, c.due_at <= at
        )
        with self._tx("read due follow-ups") as conn:
            return [action_of(r) for r in conn.execute(query.order_by(c.id))]

    def finish_action(
        self,
        action_id: int,
        status: ActionStatus,
        detail: str,
        at: datetime,
        *,
        audit: AuditNote | None = None,
    ) -> Action:
        """executing → succeeded | failed | skipped; planned → failed | skipped (refused before acting)."""
        allowed = moves_from("finish", status)
        values = {"status": status.value, "detail": detail[:4000], "updated_at": at}
        return self._move(action_id, allowed, values, "finish", audit)

    def _move(
        self,
        action_id: int,
        allowed: tuple[ActionStatus, ...],
        values: dict[str, Any],
        verb: str,
        audit: AuditNote | None = None,
    ) -> Action:
        c = actions_t.c
        states = [s.value for s in allowed]
        with self._tx(f"{verb} action {action_id}") as conn:
            where = (c.id == action_id, c.status.in_(states))
            moved = conn.execute(update(actions_t).where(*where).values(values)).rowcount
            row = conn.execute(select(actions_t).where(c.id == action_id)).first()
            if row is not None and moved and audit is not None:
                # Same transaction: the new state is never stored without its record.
                self._audit_in(conn, audit.event, values["updated_at"], row.workload_id, audit.payload)
        if row is None:
            raise StoreError(f"{verb} action {action_id}: no such action")
        if moved == 0:
            raise StoreError(f"{verb} action {action_id}: it is {row.status}, not {' or '.join(states)}")
        return action_of(row)

    def actions(self, limit: int = 50, workload_id: str | None = None) -> list[Action]:
        """The last ``limit`` actions (of one workload), oldest first."""
        return [action_of(r) for r in self._last(actions_t, limit, workload_id, "actions")]

    def count_actions_since(
        self, at: datetime, min_level: Level = Level.GRACEFUL_STOP, *, dry_run: bool = False
    ) -> tuple[int, int]:
        """(actions, GPUs) of not-skipped actions at ``min_level`` or above created since ``at``.

        Real actions by default; ``dry_run=True`` counts the dry-run ones instead, so that a
        dry-run agent previews the budget holds an enforcing one would have.
        """
        c = actions_t.c
        query = select(func.count(), func.coalesce(func.sum(c.gpu_count), 0)).where(
            c.created_at >= at,
            c.level >= int(min_level),
            c.dry_run == dry_run,
            # Dry-run actions are all recorded as skipped; real skipped ones touched nothing.
            c.status != ActionStatus.SKIPPED.value if not dry_run else c.dry_run.is_(True),
        )
        with self._tx("count actions") as conn:
            n, gpus = conn.execute(query).one()
        return int(n), int(gpus)

    def actions_by_level(self, dry_run: bool | None = None) -> dict[str, int]:
        """Actions per level label, ``L1`` … ``L4``, zeros included."""
        c = actions_t.c
        query = select(c.level, func.count()).group_by(c.level)
        if dry_run is not None:
            query = query.where(c.dry_run == dry_run)
        with self._tx("count actions by level") as conn:
            counts = {int(level): int(n) for level, n in conn.execute(query).all()}
        return {lv.label: counts.get(int(lv), 0) for lv in Level if lv is not Level.NONE}
