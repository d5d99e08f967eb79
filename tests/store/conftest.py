"""The PostgreSQL fixture shared by the state-store tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpusteward.store.db import StateStore


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database several stores can open: a SQLite file (the default), or a schema of the
    machine's PostgreSQL (for shared installs)."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.fixture
def store(db_url: str) -> Iterator[StateStore]:
    """Every store test runs on SQLite and on PostgreSQL."""
    s = StateStore(db_url)
    s.create_schema()
    yield s
    s.close()
