"""Saving the ladders: one row per workload and mode, written every tick a ladder is kept.

A waiting ladder is saved every tick (its ``last_seen_at`` moves), so a fleet with a thousand
wasting workloads writes a thousand ladders a tick. The save is one upsert compiled once
(``Bulk``) and given plain tuples; its times, mostly the same few (the tick, the ticks the
episodes began), are turned into the driver's values once per distinct time, not once per
column and row as SQLAlchemy's per-row processing did.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement

from gpusteward.domain.models import LadderState
from gpusteward.store.bulk import Bulk, bound, times
from gpusteward.store.dbschema import ladders_t
from gpusteward.store.rows import chunks

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
