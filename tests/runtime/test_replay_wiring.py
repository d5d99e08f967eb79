"""`source: replay` through the wiring, and the loop keeping its ledger on the simulated cluster."""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.models import ActionStatus, Level
from gpusteward.integrations.replay import ReplayExecutor, ReplaySource
from gpusteward.integrations.sim import SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.registry import REGISTRY
from gpusteward.store.ledger import LedgerStore

SCENARIO = Path(__file__).resolve().parents[1] / "fixtures" / "replay" / "scenario_6h.csv"
T0 = datetime(2025, 3, 4, tzinfo=UTC)


def test_replay_is_registered_and_aligns_the_trace_to_now(tmp_path: Path) -> None:
    assert "replay" in REGISTRY
    settings = load_settings(
        None,
        tick_seconds=60,
        source={
            "name": "replay",
            "replay": {"trace": str(SCENARIO)},
        },
        store={"url": f"sqlite:///{tmp_path / 's.db'}"},
    )
    now = datetime(2030, 1, 1, tzinfo=UTC)
    steward, integration = build_steward(settings, clock=SimClock(now), notifier=MemoryNotifier())
    assert isinstance(integration.source, ReplaySource)
    assert isinstance(integration.executors[0], ReplayExecutor)
    assert all(g.price_per_hour == 3.0 for g in integration.source.trace.gpus)  # priced from cost
    report = steward.tick()
    # The first hour of the trace filled the window: zombie-1 (1 % for an hour) is judged at once.
    assert report.gpus == 8
    assert {f.workload_id for f in report.findings} >= {"zombie-1"}
    assert steward.window.view(now).age_s().max() == 0  # the newest samples are "now"


def test_align_trace_keeps_the_traces_own_times(tmp_path: Path) -> None:
    settings = load_settings(
        None,
        tick_seconds=60,
        source={"name": "replay", "replay": {"trace": str(SCENARIO), "align": "trace"}},
        store={"url": f"sqlite:///{tmp_path / 's.db'}"},
    )
    clock = SimClock(T0 + timedelta(hours=1))
    steward, integration = build_steward(settings, clock=clock, notifier=MemoryNotifier())
    assert integration.source.offset_s == 0  # type: ignore[attr-defined]
    assert steward.tick().workloads == 5


def test_a_slower_trace_than_the_tick_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_settings(
        None,
        source={"name": "replay", "replay": {"trace": str(SCENARIO)}},
        store={"url": f"sqlite:///{tmp_path / 's.db'}"},
    )
    with caplog.at_level(logging.WARNING):
        build_steward(settings, clock=SimClock(T0), notifier=MemoryNotifier())
    assert "set tick_seconds: 60" in caplog.text


def test_the_loop_keeps_a_ledger(make_steward, run_for) -> None:  # type: ignore[no-untyped-def]
    steward, _integration, clock, _ = make_steward()
    start = clock.now()
    run_for(steward, clock, minutes=4 * 60)
    ledger = LedgerStore(steward.store)
    rows = ledger.daily(start.date(), start.date() + timedelta(days=2))
    stops = [
        a
        for a in steward.store.actions(limit=10_000)
        if a.level >= Level.GRACEFUL_STOP and a.status is ActionStatus.SUCCEEDED
    ]
    assert stops
    assert sum(r.amounts.stops for r in rows) == len({a.workload_id for a in stops})
    assert sum(r.amounts.waste_gpu_hours for r in rows) > 0
    assert sum(r.amounts.saved_gpu_hours for r in rows) > 0  # the horizon estimate, accrued so far
    # Waste is put on the owners of the workloads it was found on.
    found = {e.finding.workload_id for e in steward.store.all_findings()}
    owners = {info.owner.user for w in found if w and (info := steward.store.workload_info(w)) is not None}
    assert {r.key.user for r in rows if r.amounts.waste_gpu_hours > 0} == owners
    usage = ledger.usage(start.date(), start.date() + timedelta(days=2))
    assert usage
    assert all(0 <= u.amounts.busy_gpu_hours <= u.amounts.held_gpu_hours + 1e-9 for u in usage)
    assert isinstance(rows[0].key.day, str)
    assert date.fromisoformat(rows[0].key.day) >= start.date()
