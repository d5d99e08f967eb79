"""A stamp of the database's committed state: two equal stamps, the same data in every table.

PostgreSQL's ``pg_current_snapshot()`` is ``xmin:xmax:in-progress xids``. A transaction that
writes gets an xid, which moves ``xmax``; one that commits or aborts leaves the in-progress
list. So the text changes with every write anywhere in the cluster and stays the same while
nothing writes (other databases on the server and autovacuum's ANALYZE only change it more
often, never less). The web's read cache keys what it read by it.

SQLite has no such stamp (``PRAGMA data_version`` ignores the asking connection's own
commits), so there the answer is None and nothing is cached.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import text

from gpusteward.store.db import StateStore

_SNAPSHOT = text("SELECT pg_current_snapshot()::text")
#: The same snapshot under its name before PostgreSQL 13 (kept since, deprecated).
_SNAPSHOT_BEFORE_13 = text("SELECT txid_current_snapshot()::text")


def stamper(store: StateStore) -> Callable[[], str] | None:
    """A function that reads the stamp (one short query), or None where the database has none."""
    with store.transaction("read the database's dialect") as conn:
        if conn.dialect.name != "postgresql":
            return None
        version = conn.dialect.server_version_info or (0,)
    query = _SNAPSHOT if version >= (13,) else _SNAPSHOT_BEFORE_13

    def stamp() -> str:
        with store.transaction("read the state stamp") as conn:
            return str(conn.execute(query).scalar_one())

    return stamp
