"""The live ledger written every ``store.ledger_flush_seconds``, not every tick: what a crash
between two writes loses (the use since, not the waste), what a change of leader does (the
marks are read again, nothing is counted twice), and the write when the loop stops."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

import pytest
from tests.runtime.conftest import MakeSteward, small_settings
from tests.runtime.test_ledger_recorder import GPUS, T0, WORKLOADS, finding, obs, totals

from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.models import Observation
from gpusteward.runtime.driver import StopFlag, run_forever
from gpusteward.runtime.ledger_recorder import LedgerRecorder
from gpusteward.store.db import StateStore
from gpusteward.store.ledger import LedgerStore

MINUTE = timedelta(minutes=1)


def _store(tmp_path: Path, name: str) -> StateStore:
    s = StateStore(f"sqlite:///{tmp_path / name}")
    s.create_schema()
    return s


def _held(state: StateStore) -> float:
    return sum(r.amounts.held_gpu_hours for r in LedgerStore(state).usage(date(2025, 3, 4), date(2025, 3, 6)))


def _tick(rec: LedgerRecorder, k: int) -> None:
    """Minute ``k``: alice's GPUs idle since 30 minutes before T0, bob's busy."""
    at = T0 + k * MINUTE
    o: Observation = obs(at, {"g0": 0.0, "g1": 0.0, "g2": 80.0, "g3": 90.0})
    rec.record(at, o, WORKLOADS, [finding(at, ("g0", "g1"), minutes=30 + k)], [], GPUS)


def test_a_crash_between_writes_loses_the_use_since_but_no_waste(tmp_path: Path) -> None:
    every_tick, batched = _store(tmp_path, "a.db"), _store(tmp_path, "b.db")
    plain = LedgerRecorder(every_tick, PriceTable())
    for k in range(21):
        _tick(plain, k)
    first = LedgerRecorder(batched, PriceTable(), flush_every_s=300)
    for k in range(14):  # written at minutes 0, 5 and 10; minutes 11-13 wait in memory
        _tick(first, k)
    # The process dies: ``first`` is dropped unwritten. A new one reads the marks and goes on.
    second = LedgerRecorder(batched, PriceTable(), flush_every_s=300)
    for k in range(14, 21):
        _tick(second, k)
    second.flush(T0 + 20 * MINUTE)

    assert totals(batched)["waste_gpu_hours"] == pytest.approx(totals(every_tick)["waste_gpu_hours"])
    assert totals(batched)["waste_gpu_hours"] == pytest.approx(2 * 50 / 60)  # 2 GPUs, -30 .. +20 min
    # Use: minutes 11-13 were lost with the process, and the new one's first tick counts no
    # interval (it cannot know when the last was): 4 minutes of 4 GPUs.
    assert _held(every_tick) == pytest.approx(4 * 20 / 60)
    assert _held(batched) == pytest.approx(4 * 16 / 60)


def test_waiting_amounts_are_written_every_interval_and_at_each_days_first_tick(tmp_path: Path) -> None:
    state = _store(tmp_path, "s.db")
    rec = LedgerRecorder(state, PriceTable(), flush_every_s=660)
    written = {}
    for k in range(121):  # T0 is 22:00: minute 120 is midnight
        _tick(rec, k)
        written[k] = _held(state)
    assert written[10] == 0  # written at minute 0, before any interval
    assert written[11] == pytest.approx(4 * 11 / 60)
    assert written[119] == pytest.approx(4 * 110 / 60)  # the last interval's write, at minute 110
    assert written[120] == pytest.approx(4 * 120 / 60)  # a new day: written at once, not at 121


def test_after_a_reset_the_marks_are_read_again_and_nothing_is_counted_twice(tmp_path: Path) -> None:
    """Two replicas on one database, leadership handed back and forth: the waste is counted
    once, and the replica that leads again counts no use for the time the other led."""
    shared = _store(tmp_path, "s.db")
    a = LedgerRecorder(shared, PriceTable(), flush_every_s=300)
    b = LedgerRecorder(shared, PriceTable(), flush_every_s=300)
    for k in range(3):
        _tick(a, k)  # minute 0 written, 1-2 waiting
    b.reset()
    for k in range(3, 9):  # b leads: a's waiting minutes are never written
        _tick(b, k)
    b.flush(T0 + 8 * MINUTE)
    a.reset()
    for k in range(9, 12):
        _tick(a, k)
    a.flush(T0 + 11 * MINUTE)
    assert totals(shared)["waste_gpu_hours"] == pytest.approx(2 * 41 / 60)  # -30 .. +11 min, once
    # Use: b's intervals 3->4 .. 7->8 and a's 9->10, 10->11 (each new leader's first tick counts none).
    assert _held(shared) == pytest.approx(4 * 7 / 60)


@dataclass
class _Flip:
    """A leadership that answers from a script: leader, follower, leader again."""

    script: Iterator[bool]
    name: str = "script"
    released: list[bool] = field(default_factory=list)

    def acquire(self) -> bool:
        return next(self.script)

    def release(self) -> None:
        self.released.append(True)


def test_a_steward_reads_the_marks_again_when_leadership_comes_back(make_steward: MakeSteward) -> None:
    steward, _, clock, _ = make_steward()
    steward.leadership = _Flip(iter([True, True, False, False, True, True]))
    for _ in range(6):
        steward.tick()
        clock.advance(60)
    steward.settle()
    day = clock.now().date()
    rows = LedgerStore(steward.store).usage(day - timedelta(days=1), day + timedelta(days=1))
    gpus = len({u for w in steward.workloads.values() for u in w.gpu_uuids})
    # Only the minute 5->6 counts: the minute 1->2 waited unwritten when leadership went (the
    # other replica counts from its own first tick), and tick 5, the first after following,
    # counts no interval. Without the reset: 5 minutes (1->2, then 2->5 and 5->6).
    assert gpus > 0
    assert sum(r.amounts.held_gpu_hours for r in rows) == pytest.approx(gpus / 60)


def test_the_loop_writes_what_waits_when_it_stops(make_steward: MakeSteward, tmp_path: Path) -> None:
    settings = small_settings(tmp_path / "s.db", tick_seconds=60)
    assert settings.store.ledger_flush_seconds == 300  # the default
    steward, _, clock, _ = make_steward(settings)
    flag = StopFlag()
    assert run_forever(steward, 60, flag, max_ticks=4, real_sleep=False) == 4
    day = clock.now().date()
    rows = LedgerStore(steward.store).usage(day - timedelta(days=1), day + timedelta(days=1))
    assert rows  # written at the first tick (no use yet) and when the loop stopped
    assert sum(r.amounts.held_gpu_hours for r in rows) > 0


def test_the_loop_stops_with_the_leaders_episodes_and_ladders_written_even_if_the_ledger_fails(
    make_steward: MakeSteward, tmp_path: Path
) -> None:
    settings = small_settings(tmp_path / "s.db", tick_seconds=60)
    steward, _, clock, _ = make_steward(settings)
    reader = StateStore(settings.store.url)  # another process: the web, a CLI
    for _ in range(33):
        steward.tick()
        last = clock.now()
        clock.advance(60)
    mine = steward.store.open_findings()
    assert mine
    assert {e.last_seen_at for e in mine} == {last}
    assert {e.last_seen_at for e in reader.open_findings()} != {last}  # refreshes wait in memory

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    assert steward.ledger is not None
    steward.ledger.flush = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        steward.settle()
    assert reader.open_findings() == steward.store.open_findings()
    ladders = reader.load_ladders(steward.dry_run)
    assert ladders
    assert ladders == steward.store.load_ladders(steward.dry_run)
    assert {s.last_seen_at for s in ladders.values()} == {last}
    reader.close()
