"""Alembic migrations: they build exactly the schema in ``store.dbschema``, on SQLite and
PostgreSQL, and adopt a database made by the old ``create_all`` without losing a record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, MetaData, Table, create_engine, insert, select

from gpusteward.store import audit_chain, schema
from gpusteward.store.db import StateStore
from gpusteward.store.dbschema import audit_t, md

T0 = datetime(2025, 3, 4, 10, 0, tzinfo=UTC)
#: What the schema looked like before migrations and issue 7.
NEW_TABLES = {"approvals", "snoozes", "api_tokens", "used_links"}
CHAIN_COLUMNS = {"seq", "prev_hash", "hash"}


def diff(store: StateStore) -> list[object]:
    with store.transaction("compare") as conn:
        return compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), md)


def test_migrations_build_exactly_the_metadata(store: StateStore) -> None:
    assert diff(store) == []
    with store.transaction("revision") as conn:
        assert schema.current(conn) == schema.head()
    store.create_schema()  # again: a no-op at head
    assert diff(store) == []


def old_metadata() -> MetaData:
    old = MetaData()
    for table in md.sorted_tables:
        if table.name not in NEW_TABLES | {"audit_log"}:
            table.to_metadata(old)
    a = audit_t.c
    Table(
        "audit_log",
        old,
        Column("id", a.id.type, primary_key=True, autoincrement=True),
        Column("at", a.at.type, nullable=False),
        Column("event", a.event.type, nullable=False),
        Column("workload_id", a.workload_id.type, index=True),
        Column("payload", a.payload.type, nullable=False),
    )
    return old


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'old.db'}"
    return str(request.getfixturevalue("pg_url"))


def test_an_old_database_is_adopted_with_its_records_chained(url: str) -> None:
    engine = create_engine(url)
    old = old_metadata()
    old.create_all(engine)
    old_audit = old.tables["audit_log"]
    with engine.begin() as conn:
        for i in range(5):
            at = T0 + timedelta(minutes=i)
            conn.execute(
                insert(old_audit).values(at=at, event="action.start", workload_id="w", payload={"i": i})
            )
    engine.dispose()

    store = StateStore(url)
    store.create_schema()
    assert diff(store) == []
    store.audit("after.upgrade", T0 + timedelta(hours=1), "w", i=5)
    with store.transaction("verify") as conn:
        report = audit_chain.verify(conn)
        rows = conn.execute(select(audit_t).order_by(audit_t.c.id)).all()
        assert schema.current(conn) == schema.head()
    assert report.ok, report.problem
    assert (report.records, report.unchained, report.head_seq) == (6, 0, 6)
    assert [r.payload["i"] for r in rows] == [0, 1, 2, 3, 4, 5]
    assert store.approvals() == []  # the new tables are there
    store.close()


def test_adopting_refuses_a_database_missing_a_required_column(tmp_path: Path) -> None:
    from gpusteward.domain.errors import StoreError

    url = f"sqlite:///{tmp_path / 'odd.db'}"
    engine = create_engine(url)
    odd = MetaData()
    Table("actions", odd, Column("id", md.tables["actions"].c.id.type, primary_key=True))
    odd.create_all(engine)
    engine.dispose()
    with pytest.raises(StoreError, match="lacks required column"):
        StateStore(url).create_schema()
