"""Queue waits in SQL (``domain.store_ports.QueueWaitLog``): one row per started job.

The loop writes every job its sources show as started in their look-back, each tick, so the
same job comes back many times: ``INSERT … ON CONFLICT DO NOTHING`` on the primary key
(source, job id) keeps the first and ignores the rest, in one statement, on SQLite and
PostgreSQL alike (the two dialects the store runs on), and without a race between replicas.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from gpusteward.domain.queue import StartedWait
from gpusteward.domain.store_ports import QUEUE_WAITS_KEPT
from gpusteward.store.dbschema import queue_waits_t
from gpusteward.store.sql_parts import SqlParts


def _insert_new(conn: Connection, rows: list[dict[str, object]]) -> None:
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(queue_waits_t).on_conflict_do_nothing(index_elements=["source", "job_id"])
    conn.execute(stmt, rows)


class SqlQueueWaits(SqlParts):
    def record_queue_waits(self, waits: Iterable[StartedWait], at: datetime) -> None:
        # First sighting wins within the batch too, as it does against the table.
        rows: dict[tuple[str, str], dict[str, object]] = {}
        for w in waits:
            rows.setdefault(
                (w.source, w.id),
                {
                    "source": w.source,
                    "job_id": w.id,
                    "queue": w.queue,
                    "gpus": w.gpus,
                    "waited_s": w.waited_s,
                    "started_at": w.started_at,
                },
            )
        c = queue_waits_t.c
        with self._tx("record queue waits") as conn:
            if rows:
                _insert_new(conn, list(rows.values()))
            conn.execute(delete(queue_waits_t).where(c.started_at < at - QUEUE_WAITS_KEPT))

    def queue_waits(self, since: datetime, until: datetime) -> list[StartedWait]:
        c = queue_waits_t.c
        query = (
            select(queue_waits_t)
            .where(c.started_at >= since, c.started_at < until)
            .order_by(c.started_at, c.source, c.job_id)
        )
        with self._tx("read queue waits") as conn:
            return [
                StartedWait(r.job_id, r.queue, r.waited_s, r.started_at, r.gpus, r.source)
                for r in conn.execute(query)
            ]
