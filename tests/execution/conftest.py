"""Fixtures shared by the execution tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusteward.store.db import StateStore


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    """A fresh SQLite state file."""
    s = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    s.create_schema()
    return s
