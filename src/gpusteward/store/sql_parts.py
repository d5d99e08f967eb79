"""What the SQL store's mixins (actions, owner controls) need from ``StateStore``: its
transactions, the audit append inside one, and the newest rows of a table."""

from __future__ import annotations

from abc import abstractmethod
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import Table
from sqlalchemy.engine import Connection, Row


class SqlParts:
    @abstractmethod
    def _tx(self, what: str) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def _audit_in(
        self, conn: Connection, event: str, at: datetime, workload_id: str | None, payload: dict[str, Any]
    ) -> None: ...

    @abstractmethod
    def _last(self, table: Table, limit: int, workload_id: str | None, what: str) -> list[Row[Any]]: ...
