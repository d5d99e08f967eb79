"""The PostgreSQL fixture shared by the state-store tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpusteward.store.db import StateStore


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
