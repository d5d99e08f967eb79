"""The hub's fixtures: hub settings on the machine's PostgreSQL in a schema of its own per test
(dropped afterwards), and a member's web app served by uvicorn on loopback."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from tests.conftest import PG_SERVER

from gpusteward.hub.settings import HubSettings
from gpusteward.hub.store import HubStore


@pytest.fixture
def hub_schema() -> Iterator[str]:
    """A fresh schema name on the machine's PostgreSQL; the hub makes it, the test drops it."""
    pytest.importorskip("psycopg", reason="PostgreSQL driver psycopg is not installed")
    admin = create_engine(PG_SERVER, isolation_level="AUTOCOMMIT")
    schema = f"hub_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as e:
        admin.dispose()
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no PostgreSQL server at {PG_SERVER}: {e.orig}")
    yield schema
    with admin.connect() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    admin.dispose()


def hub_settings(schema: str, members: list[dict[str, Any]], **kw: Any) -> HubSettings:
    return HubSettings(store_url=PG_SERVER, store_schema=schema, members=members, **kw)


@pytest.fixture
def hub_store(hub_schema: str) -> Iterator[HubStore]:
    store = HubStore(PG_SERVER, hub_schema)
    store.upgrade()
    yield store
    store.close()
