"""A steward on the small simulated cluster, with a simulated clock and a SQLite file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpusteward.domain.integration import Integration
from gpusteward.integrations.sim import DEFAULT_START, SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.runtime.loop import Steward
from gpusteward.runtime.tick_report import TickReport
from gpusteward.store.db import StateStore

MakeSteward = Callable[..., tuple[Steward, Integration, SimClock, MemoryNotifier]]


@pytest.fixture
def settings_for(tmp_path: Path) -> Callable[..., Settings]:
    return lambda **overrides: small_settings(tmp_path / "state.db", **overrides)


def small_settings(db: Path, **overrides: object) -> Settings:
    data: dict[str, object] = {
        "mode": "enforce",
        "tick_seconds": 60,
        "source": {"name": "sim", "sim": {"scenario": "small", "history_hours": 0}},
        "store": {"url": f"sqlite:///{db}"},
    }
    data.update(overrides)
    return load_settings(None, **data)


@pytest.fixture
def make_steward(tmp_path: Path) -> MakeSteward:
    def make(
        settings: Settings | None = None,
        *,
        clock: SimClock | None = None,
        integration: Integration | None = None,
        backfill: bool = True,
    ) -> tuple[Steward, Integration, SimClock, MemoryNotifier]:
        clock = clock or SimClock(DEFAULT_START)
        notifier = MemoryNotifier()
        steward, built = build_steward(
            settings or small_settings(tmp_path / "state.db"),
            clock=clock,
            notifier=notifier,
            integration=integration,
            backfill=backfill,
        )
        return steward, built, clock, notifier

    return make


def _run_for(steward: Steward, clock: SimClock, minutes: float, tick_s: float = 60.0) -> list[TickReport]:
    reports = []
    for _ in range(int(minutes * 60 / tick_s)):
        reports.append(steward.tick())
        clock.advance(tick_s)
    return reports


@pytest.fixture
def run_for() -> Callable[..., list[TickReport]]:
    """Tick every ``tick_s`` for ``minutes`` of simulated time; returns the tick reports."""
    return _run_for


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    """A fresh SQLite state file."""
    s = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    s.create_schema()
    return s
