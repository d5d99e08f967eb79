"""What the leader last wrote of each workload (``StateStore.remember_workloads``): its snapshot,
the workload object it was made from, and the ``last_seen_at`` written with it.

A tick hands over every workload the source holds (100,000 at the largest), nearly always the
very objects of the tick before. Then nothing is read or written but ``last_seen_at``, moved at
most every ``every`` (a write per workload a tick was most of a tick's time): all of them at
once, as one statement per row compiled once (``store.bulk``), without a snapshot compared.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement

from gpusteward.domain.models import Workload
from gpusteward.store.bulk import Bulk, bound
from gpusteward.store.dbschema import workloads_t
from gpusteward.store.rows import chunks, workload_row

_ID = operator.attrgetter("id")
#: Snapshots kept at most (a very long-running agent): then the cache starts again.
_MAX_KEPT = 100_000


def _seen(dialect: Dialect) -> ClauseElement:
    return update(workloads_t).where(workloads_t.c.id == bindparam("wid"))


_SEEN = Bulk(_seen, ("last_seen_at", "wid"))


class KeptSnapshots:
    """The snapshots this store wrote, so that a steady tick reads nothing back."""

    def __init__(self, every: timedelta) -> None:
        self.every = every
        self._snapshots: dict[str, dict[str, Any]] = {}  # workload id → snapshot last written
        self._made_from: dict[str, Workload] = {}  # and the (frozen) workload it was made from
        self._seen_at: dict[str, datetime] = {}  # and the last_seen_at last written with it
        self._last: list[Workload] = []  # the workloads of the last write
        self._span: tuple[datetime, datetime] | None = None  # their oldest and newest last_seen_at

    def _same(self, ws: list[Workload]) -> bool:
        """The very workload objects of the last write (checked at C speed)."""
        last = self._last
        return bool(ws) and len(ws) == len(last) and all(map(operator.is_, ws, last))

    def steady(self, ws: list[Workload], at: datetime) -> bool:
        """Nothing to write at ``at``: the last write's workloads, each seen within ``every``."""
        span = self._span
        return span is not None and span[0] > at - self.every and span[1] <= at and self._same(ws)

    def write(self, conn: Connection, ws: list[Workload], at: datetime) -> Callable[[], None]:
        """Upsert each workload's snapshot and move ``last_seen_at`` where due, in ``conn``'s
        transaction; what to keep once it is committed."""
        if self._same(ws):  # their snapshots stand: only last_seen_at is due
            bumped = self._bump(conn, list(map(_ID, ws)), at)
            return lambda: self._kept(ws, at, None, bumped)
        snaps, made_from = self._snapshots, self._made_from
        # A source that hands back the same workload object (the replay) needs no new snapshot.
        wanted = {w.id: snaps[w.id] if made_from.get(w.id) is w else workload_row(w) for w in ws}
        if not wanted:
            return lambda: None
        c = workloads_t.c
        names = list(next(iter(wanted.values())))
        unknown = sorted(i for i in wanted if i not in snaps)
        stored = {i: snaps[i] for i in wanted if i in snaps}  # not a scan of every snapshot
        for chunk in chunks(unknown):
            for r in conn.execute(select(workloads_t).where(c.id.in_(chunk))):
                stored[r.id] = {n: r._mapping[n] for n in names}
        new = [
            {"id": i, **v, "first_seen_at": at, "last_seen_at": at}
            for i, v in wanted.items()
            if i not in stored
        ]
        changed = [
            {"wid": i, **v, "last_seen_at": at}
            for i, v in wanted.items()
            if i in stored and stored[i] is not v and stored[i] != v
        ]
        if new:
            conn.execute(insert(workloads_t), new)
        if changed:
            conn.execute(update(workloads_t).where(c.id == bindparam("wid")), changed)
        written = {r["wid"] for r in changed}  # a rewritten row has its last_seen_at already
        bumped = self._bump(conn, [i for i in stored if i not in written], at)
        return lambda: self._kept(ws, at, wanted, [*bumped, *written, *(r["id"] for r in new)])

    def _bump(self, conn: Connection, ids: list[str], at: datetime) -> list[str]:
        """Move ``last_seen_at`` to ``at`` where the one written is ``every`` old (or ahead of
        ``at``: a clock stepped back); the ids moved."""
        seen, due = self._seen_at, at - self.every
        bump = sorted(i for i in ids if i not in seen or seen[i] <= due or seen[i] > at)
        moved = bound(conn.dialect, workloads_t.c.last_seen_at, at)
        _SEEN.run(conn, [(moved, i) for i in bump])
        return bump

    def _kept(
        self, ws: list[Workload], at: datetime, wanted: dict[str, dict[str, Any]] | None, seen: list[str]
    ) -> None:
        """After the commit: the snapshots written (None: the last write's stand), ``seen``'s
        ``last_seen_at``."""
        if wanted is not None:
            if len(self._snapshots) > _MAX_KEPT:
                self._snapshots.clear()
                self._made_from.clear()
                self._seen_at.clear()
            self._snapshots.update(wanted)
            self._made_from.update((w.id, w) for w in ws)
        self._seen_at.update(dict.fromkeys(seen, at))
        self._last = ws  # only once written: a failed write is made again in full
        # Kept for steady(): looking every workload up each tick cost 30 ms at 100,000 GPUs.
        lately = list(map(self._seen_at.get, map(_ID, ws)))
        times_ = [t for t in lately if t is not None]
        self._span = (min(times_), max(times_)) if times_ and len(times_) == len(lately) else None
