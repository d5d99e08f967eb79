"""Completeness of the audit log: every state an action reached has its audit record.

The hash chain shows records changed, inserted or deleted; it cannot show a record that was
never written. Since an action's state change and its record are written in one transaction
(``store.actions``), each stored state implies its record, and ``audit verify`` checks that:

* every start (``attempts``) has an ``action.start``;
* ``executing`` with a follow-up due has an ``action.pending``;
* a final state has its event: ``action.succeeded``; ``action.failed`` or ``action.interrupted``;
  ``action.skipped`` or ``action.dry_run``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from gpusteward.domain.models import ActionStatus
from gpusteward.store.dbschema import actions_t

#: The events any one of which records an action's final state.
FINAL_EVENTS = {
    ActionStatus.SUCCEEDED.value: ("action.succeeded",),
    ActionStatus.FAILED.value: ("action.failed", "action.interrupted"),
    ActionStatus.SKIPPED.value: ("action.skipped", "action.dry_run"),
}
_BATCH = 1000


def tally(counts: Counter[tuple[str, str]], event: str, payload: Any) -> None:
    """Count an audit record of an action by (idempotency key, event)."""
    if event.startswith("action.") and isinstance(payload, dict):
        key = payload.get("key")
        if isinstance(key, str) and key:
            counts[(key, event)] += 1


def _gap(r: Any, counts: Counter[tuple[str, str]]) -> str:
    """What record the action row ``r`` lacks, or ``""``."""
    key = r.idempotency_key
    starts = counts[(key, "action.start")]
    if starts < r.attempts:
        return f"{r.attempts} start(s) but {starts} action.start record(s)"
    if (
        r.status == ActionStatus.EXECUTING.value
        and r.due_at is not None
        and not counts[(key, "action.pending")]
    ):
        return "its follow-up is pending but there is no action.pending record"
    wanted = FINAL_EVENTS.get(r.status, ())
    if wanted and not any(counts[(key, e)] for e in wanted):
        return f"it is {r.status} but there is no {' or '.join(wanted)} record"
    return ""


def missing(conn: Connection, counts: Counter[tuple[str, str]]) -> tuple[int, str]:
    """(how many actions lack a record, the first one and what it lacks)."""
    c = actions_t.c
    cols = (c.id, c.idempotency_key, c.dry_run, c.status, c.attempts, c.due_at)
    found, first, last = 0, "", 0
    while True:
        rows = conn.execute(select(*cols).where(c.id > last).order_by(c.id).limit(_BATCH)).all()
        if not rows:
            return found, first
        for r in rows:
            gap = _gap(r, counts)
            if gap:
                found += 1
                mode = " (dry-run)" if r.dry_run else ""
                first = first or f"action id {r.id}{mode}, key {r.idempotency_key}: {gap}"
        last = rows[-1].id
