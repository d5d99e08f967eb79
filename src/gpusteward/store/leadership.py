"""Who acts when two replicas run: ``ha.leader_election`` → a ``Leadership``.

* ``none``: this replica always leads (run only one).
* ``postgres``: a session-level advisory lock on the state database, held on a connection of its
  own. PostgreSQL frees the lock when that session ends: the leader process died (its socket
  closed), or its host went silent and the server's TCP keepalives, set per session from
  ``ha.lease_seconds``, gave up on it. Each ``acquire`` checks the lock is still held on a live
  connection; a leader whose connection was cut stops leading at once and competes again.
* ``kubernetes-lease``: a coordination.k8s.io Lease (``integrations/kubernetes``).

``runtime.registry.build_leadership`` picks one from the config.

The lock's key derives from ``ha.lease_name`` and the database schema, so replicas sharing a
schema compete for one lock whatever host name their URLs use.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from gpusteward.domain.errors import ConfigError

log = logging.getLogger(__name__)


class AlwaysLeader:
    """``ha.leader_election: none``: a single replica, which always acts."""

    name = "none"

    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        return None


def lock_key(name: str, schema: str) -> int:
    """A signed 64-bit advisory-lock key for (lease name, schema)."""
    digest = hashlib.sha256(f"gpusteward:{name}:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresLeadership:
    """A session-level ``pg_try_advisory_lock`` held on a dedicated connection."""

    name = "postgres"

    def __init__(
        self, url: str, *, lease_name: str = "gpusteward-leader", lease_seconds: float = 15.0
    ) -> None:
        parsed = make_url(url)
        if parsed.get_backend_name() != "postgresql":
            raise ConfigError(
                f"ha.leader_election: postgres needs a PostgreSQL store.url, not {parsed.get_backend_name()}"
            )
        # NullPool: a dropped connection is really closed, never handed back from a pool.
        self._engine: Engine = create_engine(parsed, poolclass=NullPool)
        self.lease_name = lease_name
        self.lease_seconds = lease_seconds
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        self._conn: Connection | None = None
        self._key: int | None = None

    def _connect(self) -> Connection:
        conn = self._engine.connect()
        # The server drops a silent client after about lease_seconds; the lock goes with it.
        idle = max(1, int(self.lease_seconds / 3))
        interval = max(1, int(self.lease_seconds / 6))
        for setting, value in (
            ("tcp_keepalives_idle", idle),
            ("tcp_keepalives_interval", interval),
            ("tcp_keepalives_count", 3),
            ("application_name", f"gpusteward-leader {self.identity}"[:63]),
        ):
            conn.execute(text("SELECT set_config(:k, :v, false)"), {"k": setting, "v": str(value)})
        conn.commit()
        if self._key is None:
            schema = conn.execute(text("SELECT current_schema()")).scalar() or "public"
            conn.commit()
            self._key = lock_key(self.lease_name, str(schema))
        return conn

    def _holds(self, conn: Connection) -> bool:
        held = conn.execute(
            text(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND pid = pg_backend_pid() AND objsubid = 1 "
                "AND ((classid::bigint << 32) | objid::bigint) = :k)"
            ),
            {"k": self._key},
        ).scalar()
        conn.commit()
        return bool(held)

    def acquire(self) -> bool:
        """Leader while this connection holds the lock; take it when it is free."""
        try:
            if self._conn is None or self._conn.closed or self._conn.invalidated:
                self._conn = self._connect()
            conn = self._conn
            if self._holds(conn):
                return True
            got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self._key}).scalar()
            conn.commit()
            if got:
                log.info("leader now (%s, lock %s)", self.identity, self._key)
            return bool(got)
        except SQLAlchemyError as e:
            # The lock session is gone (killed, server restarted): we are not the leader now.
            log.warning("leadership lock connection failed: %s", str(e).splitlines()[0][:200])
            self._drop()
            return False

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.invalidate()
                self._conn.close()
            except SQLAlchemyError:
                pass
        self._conn = None

    def release(self) -> None:
        if self._conn is not None and not self._conn.closed:
            try:
                self._conn.execute(text("SELECT pg_advisory_unlock_all()"))
                self._conn.commit()
            except SQLAlchemyError:
                pass
        self._drop()
        self._engine.dispose()

    def backend_pid(self) -> int | None:
        """The lock session's server PID (for operators and tests), or None when not connected."""
        if self._conn is None:
            return None
        pid: Any = self._conn.execute(text("SELECT pg_backend_pid()")).scalar()
        self._conn.commit()
        return int(pid)
