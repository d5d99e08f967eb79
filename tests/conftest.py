"""Fixtures shared by every test folder."""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def _load_bench(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH_DIR / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses in the module look themselves up here
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def load_bench() -> Callable[[str], ModuleType]:
    """Import ``bench/<name>.py`` as a module, for the benchmarks' tiny-size smoke tests."""
    return _load_bench


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
