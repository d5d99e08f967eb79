"""Saving the ladders: one row per workload and mode.

A waiting ladder changes every tick (its ``last_seen_at`` moves), so a fleet with a thousand
wasting workloads would write and read a thousand ladders a tick. The store that writes them
(the leader's) keeps them in memory instead (``KeptLadders``): a read after its first write is
answered from memory, and a ladder is written when anything but ``last_seen_at`` changed, or
when the stored ``last_seen_at`` is ``every`` old (nothing decides by it: it tells a reader how
recently the ladder was climbed). It reads the table again (``forget``) when leadership changes
hands or any of the store's transactions fails.

The save is one upsert compiled once (``Bulk``) and given plain tuples; its times, mostly the
same few (the tick, the ticks the episodes began), are turned into the driver's values once per
distinct time, not once per column and row as SQLAlchemy's per-row processing did.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from operator import attrgetter

from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement

from gpusteward.domain.models import LadderState
from gpusteward.store.bulk import Bulk, bound, times
from gpusteward.store.dbschema import ladders_t
from gpusteward.store.rows import chunks, ladder_of

#: The upsert's parameters, in this order: the key, then ``LadderState``'s other fields.
_COLUMNS = (
    "workload_id",
    "dry_run",
    "incarnation",
    "rule",
    "first_seen_at",
    "last_seen_at",
    "step",
    "step_at",
    "first_warned_at",
    "clean_since",
)
_KEY = ("workload_id", "dry_run")


def _upsert(dialect: Dialect) -> ClauseElement:
    stmt = (postgresql if dialect.name == "postgresql" else sqlite).insert(ladders_t)
    sets = {n: stmt.excluded[n] for n in _COLUMNS if n not in _KEY}
    upsert: ClauseElement = stmt.on_conflict_do_update(index_elements=list(_KEY), set_=sets)
    return upsert


_UPSERT = Bulk(_upsert, _COLUMNS)


def save(conn: Connection, states: Sequence[LadderState], clear: Iterable[str], *, dry_run: bool) -> None:
    """Save ``states`` (each replacing its workload's ladder in this mode) and end the ladders
    of ``clear``; a workload in both keeps the saved one."""
    c = ladders_t.c
    gone = sorted(set(clear) - {s.workload_id for s in states})
    for chunk in chunks(gone):
        conn.execute(delete(ladders_t).where(c.dry_run == dry_run, c.workload_id.in_(chunk)))
    at, mode = times(conn.dialect, c.last_seen_at), bound(conn.dialect, c.dry_run, dry_run)
    rows = [
        (
            s.workload_id,
            mode,
            s.incarnation,
            s.rule,
            at(s.first_seen_at),
            at(s.last_seen_at),
            s.step,
            at(s.step_at),
            at(s.first_warned_at),
            at(s.clean_since),
        )
        for s in states
    ]
    # Sorted by key: two ticks' saves take the index's pages in the same order.
    _UPSERT.run(conn, sorted(rows, key=lambda r: r[0]))


def _as_read(s: LadderState) -> LadderState:
    """``s`` as the table gives it back: its times in UTC."""
    times_ = (s.first_seen_at, s.last_seen_at, s.step_at, s.first_warned_at, s.clean_since)
    if all(t is None or t.tzinfo is UTC for t in times_):
        return s

    def utc(t: datetime | None) -> datetime | None:
        return None if t is None else t.astimezone(UTC)

    return replace(
        s,
        first_seen_at=s.first_seen_at.astimezone(UTC),
        last_seen_at=s.last_seen_at.astimezone(UTC),
        step_at=utc(s.step_at),
        first_warned_at=utc(s.first_warned_at),
        clean_since=utc(s.clean_since),
    )


#: A ladder's fields but ``last_seen_at`` (a ``replace`` per ladder and tick cost ~5 µs).
_BUT_LAST_SEEN = attrgetter(*(f.name for f in fields(LadderState) if f.name != "last_seen_at"))


class KeptLadders:
    """The ladders of each mode this store writes, as they are now and as they are stored."""

    def __init__(self, every: timedelta) -> None:
        self.every = every
        self._writes: set[bool] = set()  # modes written since the last ``forget``
        self._now: dict[bool, dict[str, LadderState]] = {}
        self._stored: dict[bool, dict[str, LadderState]] = {}

    def forget(self) -> None:
        """Read the table again (another replica may have written)."""
        self._writes, self._now, self._stored = set(), {}, {}

    def load(self, conn: Connection, dry_run: bool) -> dict[str, LadderState]:
        kept = self._now.get(dry_run)
        if kept is not None:
            return dict(sorted(kept.items()))
        c = ladders_t.c
        rows = conn.execute(select(ladders_t).where(c.dry_run == dry_run).order_by(c.workload_id)).all()
        states = {r.workload_id: ladder_of(r) for r in rows}
        if dry_run in self._writes:  # this store writes them: memory is the table from now on
            self._now[dry_run], self._stored[dry_run] = dict(states), dict(states)
        return states

    def update(
        self, conn: Connection, states: Sequence[LadderState], clear: Iterable[str], *, dry_run: bool
    ) -> None:
        """Save ``states`` and end the ladders of ``clear`` (``save``), writing only what is due."""
        gone = set(clear) - {s.workload_id for s in states}
        now, stored = self._now.get(dry_run), self._stored.get(dry_run)
        self._writes.add(dry_run)
        if now is None or stored is None:  # not read since the last forget: write them all
            save(conn, states, gone, dry_run=dry_run)
            return
        read = list(map(_as_read, states))
        due = [s for s in read if self._due(s, stored.get(s.workload_id))]
        save(conn, due, gone, dry_run=dry_run)
        for wid in gone:
            now.pop(wid, None)
            stored.pop(wid, None)
        now.update((s.workload_id, s) for s in read)
        stored.update((s.workload_id, s) for s in due)

    def _due(self, s: LadderState, stored: LadderState | None) -> bool:
        if stored is None or s.last_seen_at - stored.last_seen_at >= self.every:
            return True
        return _BUT_LAST_SEEN(stored) != _BUT_LAST_SEEN(s)

    def flush(self, conn: Connection) -> None:
        """Write every ladder whose newest ``last_seen_at`` is not stored yet (the loop stops)."""
        for dry_run, now in self._now.items():
            stored = self._stored[dry_run]
            late = [s for wid, s in now.items() if stored.get(wid) != s]
            save(conn, late, (), dry_run=dry_run)
            stored.update((s.workload_id, s) for s in late)
