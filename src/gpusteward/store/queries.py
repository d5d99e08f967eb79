"""Reads of the state store for crash recovery, approvals in the action path and notice limits.

Kept beside ``store.db`` (whose methods serve the loop's own writes) so that module stays small.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import select

from gpusteward.domain.models import Action, ActionStatus
from gpusteward.store.controls import ApprovalRecord, _approval_of
from gpusteward.store.db import StateStore
from gpusteward.store.dbschema import (
    NoticeRecord,
    action_of,
    actions_t,
    approvals_t,
    notice_of,
    notices_t,
)

_CHUNK = 500
_RETRY = re.compile(r"~r(\d+)$")


def unfinished_actions(store: StateStore, *, dry_run: bool) -> list[Action]:
    """Actions left ``planned`` or ``executing``: after a crash, the ones to reconcile. An
    ``executing`` one with ``due_at`` is a two-phase stop under way, finished by its follow-up."""
    c = actions_t.c
    states = [ActionStatus.PLANNED.value, ActionStatus.EXECUTING.value]
    pending = c.due_at.is_not(None)  # a two-phase stop under way: its follow-up finishes it
    query = select(actions_t).where(c.status.in_(states), c.dry_run == dry_run, ~pending).order_by(c.id)
    with store.transaction("read unfinished actions") as conn:
        return [action_of(r) for r in conn.execute(query)]


def action_by_key(store: StateStore, key: str, *, dry_run: bool) -> Action | None:
    c = actions_t.c
    query = select(actions_t).where(c.idempotency_key == key, c.dry_run == dry_run)
    with store.transaction("read action") as conn:
        row = conn.execute(query).first()
    return None if row is None else action_of(row)


def base_key(approval_key: str) -> str:
    """The action idempotency key an approval request is for (``<key>~rN`` is its N-th request)."""
    m = _RETRY.search(approval_key)
    return approval_key if m is None else approval_key[: m.start()]


def latest_approvals(
    store: StateStore, workload_ids: Iterable[str], *, dry_run: bool
) -> dict[str, tuple[ApprovalRecord, int]]:
    """Action key → (its latest approval request, how many requests it had), for these workloads."""
    ids = sorted(set(workload_ids))
    c = approvals_t.c
    out: dict[str, tuple[ApprovalRecord, int]] = {}
    with store.transaction("read approvals") as conn:
        for i in range(0, len(ids), _CHUNK):
            query = (
                select(approvals_t)
                .where(c.workload_id.in_(ids[i : i + _CHUNK]), c.dry_run == dry_run)
                .order_by(c.id)
            )
            for r in conn.execute(query):
                key = base_key(r.idempotency_key)
                count = out[key][1] + 1 if key in out else 1
                out[key] = (_approval_of(r), count)
    return out


def notices_since(store: StateStore, at: datetime) -> list[NoticeRecord]:
    """Every notice recorded since ``at``, oldest first."""
    c = notices_t.c
    with store.transaction("read notices") as conn:
        rows = conn.execute(select(notices_t).where(c.at >= at).order_by(c.id)).all()
    return [notice_of(r) for r in rows]


def notice_sent(store: StateStore, dedup_key: str) -> bool:
    """Whether a notice with this key was recorded as sent (an L1 step's effect)."""
    c = notices_t.c
    query = select(c.id).where(c.dedup_key == dedup_key, c.sent.is_(True)).limit(1)
    with store.transaction("read notices") as conn:
        return conn.execute(query).first() is not None
