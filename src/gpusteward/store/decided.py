"""Recording decisions: a workload's decision is stored when its (level, step, hold) differs
from the last one stored for it, so a ladder waiting tick after tick is one row, not one a tick.

Telling which differ took a read of every planned workload's newest decision each tick (5,000
workloads at 100,000 GPUs). The store that records them (only the leader does) keeps each
workload's last signature instead (``LastDecisions``) and reads only workloads it has not seen
since it started or last forgot (``forget``: leadership changed hands, or a transaction failed).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection

from gpusteward.domain.models import Decision
from gpusteward.store.dbschema import decisions_t
from gpusteward.store.rows import chunks, decision_row

#: ``Decision.signature``: level, step, hold.
Signature = tuple[int, str, str]
#: Workloads whose signature is kept, at most (then all are read again as they come).
MAX_KEPT = 200_000


class LastDecisions:
    """Each workload's last stored decision signature, as far as this store has read or written."""

    def __init__(self) -> None:
        self._last: dict[str, Signature | None] = {}  # None: read, and none stored

    def forget(self) -> None:
        """Read the table again (another replica may have written)."""
        self._last = {}

    def record(self, conn: Connection, decisions: Sequence[Decision]) -> int:
        """Insert the decisions whose signature differs from their workload's last; how many."""
        last = self._last
        if len(last) > MAX_KEPT:
            last.clear()
        unread = sorted({d.workload_id for d in decisions} - last.keys())
        c = decisions_t.c
        for chunk in chunks(unread):
            last.update(dict.fromkeys(chunk))
            newest = select(func.max(c.id)).where(c.workload_id.in_(chunk)).group_by(c.workload_id)
            rows = conn.execute(select(c.workload_id, c.level, c.step, c.hold).where(c.id.in_(newest)))
            last.update({r.workload_id: (r.level, r.step, r.hold) for r in rows})
        new = []
        for d in decisions:
            sig = d.signature
            if last[d.workload_id] != sig:
                last[d.workload_id] = sig
                new.append(decision_row(d))
        if new:
            conn.execute(insert(decisions_t), new)
        return len(new)
