"""``Bulk``: a statement compiled once per dialect and run with plain tuples, on SQLite and on
PostgreSQL (named parameters there), whatever order the caller names its columns in."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Column, Float, Integer, MetaData, String, Table, create_engine, insert, select
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.sql import ClauseElement

from gpusteward.store.bulk import Bulk, bound
from gpusteward.store.dbschema import UTCDateTime

md = MetaData()
things = Table(
    "things",
    md,
    Column("id", Integer, primary_key=True),
    Column("name", String(20)),
    Column("weight", Float),
    Column("at", UTCDateTime),
)


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'b.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    e = create_engine(url)
    md.create_all(e)
    yield e
    e.dispose()


def _insert(dialect: Dialect) -> ClauseElement:
    return insert(things)


def test_rows_go_in_whatever_order_the_columns_are_named(engine: Engine) -> None:
    at = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    bulk = Bulk(_insert, ("weight", "id", "at", "name"))  # not the table's order
    with engine.begin() as conn:
        stamp = bound(conn.dialect, things.c.at, at)  # the driver's value, once
        bulk.run(conn, [(2.5, 1, stamp, "a"), (0.0, 2, stamp, "b")])
        bulk.run(conn, [])  # nothing to write: no statement
        rows = conn.execute(select(things).order_by(things.c.id)).all()
    assert [tuple(r) for r in rows] == [(1, "a", 2.5, at), (2, "b", 0.0, at)]


def test_a_statement_with_other_parameters_is_refused(engine: Engine) -> None:
    with engine.begin() as conn, pytest.raises(AssertionError, match="parameters"):
        Bulk(_insert, ("id", "name", "colour")).run(conn, [(1, "a", "red")])
