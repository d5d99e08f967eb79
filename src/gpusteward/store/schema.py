"""Schema management: Alembic migrations to head, on SQLite and PostgreSQL alike.

``upgrade`` is what ``StateStore.create_schema()`` and ``gpusteward db upgrade`` run. A database
made before migrations existed (tables, no ``alembic_version``) is *adopted*: missing tables are
created, missing nullable columns added (the audit hash chain's), its audit records chained in
their order, and it is stamped at the first revision; later revisions then apply as usual.
On PostgreSQL a transaction-level advisory lock keeps two replicas from migrating at once.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.script import ScriptDirectory
from sqlalchemy import Column, UniqueConstraint, inspect, text
from sqlalchemy.engine import Connection, Engine

from gpusteward.domain.errors import StoreError
from gpusteward.store import audit_chain
from gpusteward.store.dbschema import md

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"
#: The revision a database made by the old ``create_all`` is stamped at when adopted.
BASE_REVISION = "0001"
_MIGRATION_LOCK = 0x67707573_6D696772  # "gpusmigr"


def _config(conn: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if conn is not None:
        cfg.attributes["connection"] = conn
    return cfg


@lru_cache(maxsize=1)
def head() -> str:
    """The newest revision shipped with this version of gpusteward."""
    found = ScriptDirectory.from_config(_config()).get_current_head()
    if found is None:
        raise StoreError("no migrations found in the package")
    return found


def current(conn: Connection) -> str | None:
    """The revision the database is at, or None when it has no ``alembic_version`` table."""
    return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> str:
    """Bring the database to the newest revision; returns it."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
        tables = set(inspect(conn).get_table_names())
        if "alembic_version" in tables and current(conn) == head():
            return head()
        if "alembic_version" not in tables and tables & set(md.tables):
            _adopt(conn, tables)
        command.upgrade(_config(conn), "head")
    return head()


def _adopt(conn: Connection, tables: set[str]) -> None:
    """Stamp a database made by ``create_all`` at the base revision, filling what it lacks."""
    insp = inspect(conn)
    ops = Operations(MigrationContext.configure(conn, opts={"render_as_batch": True}))
    added: list[str] = []
    for table in md.sorted_tables:
        if table.name not in tables:
            table.create(conn)
            added.append(table.name)
            continue
        have = {c["name"] for c in insp.get_columns(table.name)}
        missing = [c for c in table.columns if c.name not in have]
        if not missing:
            continue
        strict = [c.name for c in missing if not c.nullable]
        if strict:
            raise StoreError(
                f"cannot adopt the database: table {table.name} lacks required column(s) "
                f"{', '.join(strict)}; migrate it by hand"
            )
        have_uniques = {u["name"] for u in insp.get_unique_constraints(table.name)}
        with ops.batch_alter_table(table.name) as batch:
            for col in missing:
                batch.add_column(Column(col.name, col.type, nullable=True))
            new = {c.name for c in missing}
            for uc in table.constraints:
                if not isinstance(uc, UniqueConstraint) or uc.name in have_uniques:
                    continue
                names = [c.name for c in uc.columns]
                if new & set(names):
                    batch.create_unique_constraint(str(uc.name), names)
        added.extend(f"{table.name}.{c.name}" for c in missing)
    chained = audit_chain.chain_unchained(conn)
    command.stamp(_config(conn), BASE_REVISION)
    log.warning(
        "adopted a database made before migrations: added %s; chained %d audit record(s)",
        ", ".join(added) or "nothing",
        chained,
    )
