"""Fixtures shared by every test folder."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

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
