"""Small JSON documents in the ``settings`` table (the roll-out's stage history, its watch of
recent stops and false kills): each written with its audit record in one transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update

from gpusteward.domain.records import AuditNote
from gpusteward.store.dbschema import settings_t
from gpusteward.store.sql_parts import SqlParts


class SqlDocs(SqlParts):
    def load_doc(self, key: str) -> Any:
        with self._tx(f"read {key}") as conn:
            return conn.execute(select(settings_t.c.value).where(settings_t.c.key == key)).scalar()

    def save_doc(
        self,
        key: str,
        value: Any,
        *,
        at: datetime,
        audit: AuditNote | None = None,
        workload_id: str | None = None,
    ) -> None:
        with self._tx(f"write {key}") as conn:
            done = conn.execute(update(settings_t).where(settings_t.c.key == key).values(value=value))
            if done.rowcount == 0:
                conn.execute(insert(settings_t).values(key=key, value=value))
            if audit is not None:
                self._audit_in(conn, audit.event, at, workload_id, dict(audit.payload))
