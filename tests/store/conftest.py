"""The PostgreSQL fixture shared by the state-store tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from gpusteward.store.db import StateStore

#: The machine's PostgreSQL (trust auth); another server through GPUSTEWARD_TEST_PG_URL.
PG_SERVER = os.environ.get("GPUSTEWARD_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A throwaway schema on the machine's PostgreSQL (trust auth), or a skip that says why.

    Under CI (CI=true) a missing server is a failure: .ci/run makes sure one answers.
    """
    if not os.environ.get("CI"):
        pytest.importorskip("psycopg", reason="PostgreSQL driver psycopg is not installed")
    admin = create_engine(PG_SERVER, isolation_level="AUTOCOMMIT")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
    except OperationalError as e:
        admin.dispose()
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no PostgreSQL server at {PG_SERVER}: {e.orig}")
    yield f"{PG_SERVER}?options=-csearch_path%3D{schema}"
    with admin.connect() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    """Every store test runs on SQLite (the default) and on PostgreSQL (for shared installs)."""
    url = (
        f"sqlite:///{tmp_path / 'state.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    s = StateStore(url)
    s.create_schema()
    yield s
    s.close()
