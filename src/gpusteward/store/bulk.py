"""Statements a tick runs over thousands of rows, compiled once per dialect and handed to the
driver's ``executemany`` with plain tuples.

SQLAlchemy builds and processes a parameter dict per row of an ``executemany``; for the ledger's
usage upsert and the refresh of the open finding episodes that was more than half of the
statement's time. Here the caller gives each row's values as the driver takes them (text,
numbers, JSON already written as text) in the order it names the columns, and ``bound`` turns a
value that needs the column type's processing (a datetime) into the driver's value once, not
once per row.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Column
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

#: What a statement is compiled for: the dialect's name, driver and paramstyle (not the dialect
#: object, which each engine has its own of).
_Key = tuple[str, str, str]


class Bulk:
    """One statement built by ``build`` for a dialect, run with rows of ``columns`` (its
    parameter names, in the order of each row's values)."""

    def __init__(self, build: Callable[[Dialect], ClauseElement], columns: Sequence[str]) -> None:
        self.build, self.columns = build, tuple(columns)
        self._compiled: dict[_Key, tuple[str, Callable[[Sequence[tuple[Any, ...]]], list[Any]]]] = {}

    def run(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        if not rows:
            return
        sql, arrange = self._for(conn.dialect)
        conn.exec_driver_sql(sql, arrange(rows))

    def _for(self, dialect: Dialect) -> tuple[str, Callable[[Sequence[tuple[Any, ...]]], list[Any]]]:
        key = (dialect.name, dialect.driver, dialect.paramstyle)
        if key not in self._compiled:
            self._compiled[key] = self._compile(dialect)
        return self._compiled[key]

    def _compile(self, dialect: Dialect) -> tuple[str, Callable[[Sequence[tuple[Any, ...]]], list[Any]]]:
        compiled = self.build(dialect).compile(dialect=dialect, column_keys=list(self.columns))
        if not isinstance(compiled, SQLCompiler):
            raise TypeError(f"{type(compiled).__name__} is not a SQL statement's compiler")
        names = self.columns
        if not compiled.positional:  # a named paramstyle (psycopg's pyformat): a dict per row
            if set(compiled.binds) != set(names):
                raise AssertionError(f"statement parameters {sorted(compiled.binds)} are not {names}")
            return compiled.string, lambda rows: [dict(zip(names, r, strict=True)) for r in rows]
        order = tuple(compiled.positiontup or ())
        if sorted(order) != sorted(names):
            raise AssertionError(f"statement parameters {order} are not {names}")
        if order == names:
            return compiled.string, list
        if len(order) < 2:  # itemgetter of one index gives the value, not a tuple
            raise AssertionError("a bulk statement has two parameters or more")
        pick = operator.itemgetter(*map(names.index, order))
        return compiled.string, lambda rows: list(map(pick, rows))


def bound(dialect: Dialect, column: Column[Any], value: Any) -> Any:
    """``value`` as the driver takes it for ``column`` (its type's bind processing, once)."""
    process = column.type.dialect_impl(dialect).bind_processor(dialect)
    return value if process is None else process(value)


def times(dialect: Dialect, column: Column[Any]) -> Callable[[datetime | None], Any]:
    """``bound`` for a time column, worked out once per distinct time (a tick's rows share a few:
    the tick's own, the ticks their episodes began)."""
    done: dict[datetime | None, Any] = {None: None}

    def value(at: datetime | None) -> Any:
        if at not in done:
            done[at] = bound(dialect, column, at)
        return done[at]

    return value
