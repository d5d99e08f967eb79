"""Whether the state database takes writes, asked once before the loop starts.

A read-only file, mount or replica otherwise fails every tick with the same long traceback,
and the agent looks alive while it records nothing.
"""

from __future__ import annotations

from sqlalchemy import text

from gpusteward.domain.errors import StoreError
from gpusteward.store.db import StateStore


class _Undo(Exception):
    """Raised inside the probe's transaction so that it rolls back."""


def check_writable(store: StateStore) -> None:
    """Raise ``StoreError`` when the database refuses a write. Changes nothing: the probe
    deletes no row (Alembic's table always exists once the schema does), in a transaction
    that is rolled back; a read-only SQLite file or PostgreSQL transaction still refuses it."""
    try:
        with store.transaction(f"the state database {store.url} refuses writes") as conn:
            conn.execute(text("DELETE FROM alembic_version WHERE 1 = 0"))
            raise _Undo
    except _Undo:
        return
    except StoreError as e:
        raise StoreError(str(e).splitlines()[0]) from None
