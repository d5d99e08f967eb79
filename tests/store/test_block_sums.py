"""The blocks of slots the window store keeps between ticks (``BlockSums``): a kept block gives
the same answer, to the bit, as a store that was never looked at; a block is reduced once while
nothing is written into it; and blocks the window moved past are let go."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gpusteward.domain.models import Metric, Sample
from gpusteward.store import window_view
from gpusteward.store.window import WindowStore

STEP = 10.0
SLOTS = 180
T0 = datetime(2026, 1, 1, tzinfo=UTC)
UTIL = Metric.GPU_UTIL
GPUS = 50


def _at(slot: int) -> datetime:
    return T0 + timedelta(seconds=slot * STEP)


def _store(values: np.ndarray, upto: int, start: int = 0) -> WindowStore:
    store = WindowStore(SLOTS * STEP, STEP, metrics=(UTIL,), capacity=GPUS)
    store.register(f"g{i}" for i in range(GPUS))
    for slot in range(start, upto + 1):
        store.ingest_arrays(_at(slot), {UTIL: values[slot]})
    return store


def _answers(store: WindowStore, slot: int) -> list[np.ndarray]:
    view = store.view(_at(slot))
    return [
        f(d)
        for d in (300.0, 1800.0, 1200.0)
        for f in (
            lambda d: view.mean(UTIL, d),
            lambda d: view.coverage(UTIL, d),
            lambda d: view.fraction_below(UTIL, 5.0, d),
            lambda d: view.min(UTIL, d),
            lambda d: view.max(UTIL, d),
        )
    ]


@pytest.fixture
def values() -> np.ndarray:
    rng = np.random.default_rng(7)
    v = rng.uniform(0, 100, size=(400, GPUS)).astype(np.float32)  # not integers: sums round
    v[rng.random(v.shape) < 0.2] = np.nan  # missing readings
    v[:, :5] = rng.uniform(0, 6, size=(400, 5))  # some GPUs near the threshold
    return v


def test_a_store_looked_at_every_tick_answers_as_one_never_looked_at(values):
    live = _store(values, 0)
    for slot in range(1, 400):
        live.ingest_arrays(_at(slot), {UTIL: values[slot]})
        got = _answers(live, slot)
        if slot % 37 == 0:  # against a store with the same values and nothing kept
            fresh = _answers(_store(values, slot, start=max(0, slot - SLOTS)), slot)
            for a, b in zip(got, fresh, strict=True):
                np.testing.assert_array_equal(a, b)  # bit for bit, NaN where NaN


def test_a_whole_block_is_reduced_once_while_nothing_is_written_into_it(values, monkeypatch):
    store = _store(values, 250)
    reduced: list[tuple[int, int]] = []
    piece = window_view.WindowView._piece

    def counted(self, m, key, a, b):  # type: ignore[no-untyped-def]
        reduced.append((a, b))
        return piece(self, m, key, a, b)

    monkeypatch.setattr(window_view.WindowView, "_piece", counted)
    size = store.sums.block_slots
    store.view(_at(250)).mean(UTIL, 1800.0)
    first = [(a, b) for a, b in reduced if a % size == 0 and b - a + 1 == size]
    assert len(first) >= SLOTS // size - 1  # every whole block of the window, once
    reduced.clear()
    store.ingest_arrays(_at(251), {UTIL: values[251]})
    store.view(_at(251)).mean(UTIL, 1800.0)
    # The next tick reads only the partial blocks at the range's two ends (twice each: present
    # values and their sum), plus a block the new slot completed, if it did.
    assert len(reduced) <= 2 * 3
    assert all(b - a + 1 <= size for a, b in reduced)


def test_a_late_sample_makes_its_block_reduced_again(values):
    store = _store(values, 250)
    before = store.view(_at(250)).mean(UTIL, 1800.0)
    # GPU 0's reading of slot 200 arrives late (the others' are written again, unchanged).
    store.ingest_arrays(_at(200), {UTIL: np.where(np.arange(GPUS) == 0, 99.0, values[200])})
    after = store.view(_at(250)).mean(UTIL, 1800.0)
    assert after[0] != before[0]
    np.testing.assert_array_equal(after[1:], before[1:])


def test_blocks_the_window_moved_past_are_let_go(values):
    store = _store(values, 10)
    for slot in range(11, 400):
        store.ingest_arrays(_at(slot), {UTIL: values[slot]})
        store.view(_at(slot)).mean(UTIL, 1800.0)
        if slot == 100:  # a range asked for once: its run goes once the window has left it
            store.view(_at(slot)).mean(UTIL, 300.0)
    size = store.sums.block_slots
    per_block = GPUS * (1 + 8)  # present values (uint8) and their sum (float64)
    # and one run of whole blocks (int32 counts, float64 sums) and one tail (as a block)
    per_range = GPUS * (4 + 8) + per_block
    assert 0 < store.sums.nbytes <= (SLOTS // size + 1) * per_block + per_range


def test_a_view_made_before_an_ingest_keeps_nothing_for_later_views(values):
    store = _store(values, 250)
    stale = store.view(_at(250))
    # A GPU first seen now, with a late reading in a block the stale view will reduce whole.
    store.ingest(_at(250), [Sample("late-gpu", _at(200), gpu_util_pct=42.0)])
    stale.mean(UTIL, 1800.0)  # reads the live rings with the GPUs it was made with
    fresh = store.view(_at(250)).mean(UTIL, 1800.0)
    assert fresh[store.index_of("late-gpu")] == 42.0


def test_a_late_sample_in_the_newest_block_is_read_at_once(values):
    """The newest, incomplete block is kept as far as it is written (the tail): a late reading
    into it is not hidden behind the kept part."""
    store = _store(values, 250)
    size = store.sums.block_slots
    late = 250 - 250 % size  # the newest block's first slot, read by the last look
    before = store.view(_at(250)).mean(UTIL, 1800.0)
    store.ingest_arrays(_at(late), {UTIL: np.where(np.arange(GPUS) == 7, 99.0, values[late])})
    after = store.view(_at(250)).mean(UTIL, 1800.0)
    assert after[7] != before[7]
    np.testing.assert_array_equal(after[np.arange(GPUS) != 7], before[np.arange(GPUS) != 7])
    fresh = _store(values, 250, start=250 - SLOTS)
    fresh.ingest_arrays(_at(late), {UTIL: np.where(np.arange(GPUS) == 7, 99.0, values[late])})
    np.testing.assert_array_equal(after, fresh.view(_at(250)).mean(UTIL, 1800.0))


def test_a_gpu_first_seen_now_extends_what_is_kept(values):
    """Runs and tails kept for 50 GPUs serve 51 once one registers: it never held a value in
    them, so its column is empty, and it answers as in a store that was never looked at."""
    store = _store(values, 250)
    for slot in (249, 250):
        _answers(store, slot)
    store.ingest_arrays(_at(251), {UTIL: values[251]})
    store.ingest(_at(251), [Sample("new", _at(251), gpu_util_pct=3.0)])
    got = _answers(store, 251)
    fresh = _store(values, 251, start=251 - SLOTS)
    fresh.ingest(_at(251), [Sample("new", _at(251), gpu_util_pct=3.0)])
    for a, b in zip(got, _answers(fresh, 251), strict=True):
        np.testing.assert_array_equal(a, b)
    assert got[0][store.index_of("new")] == 3.0  # the mean over 5 minutes: its one reading


@pytest.mark.parametrize("where", ["a whole block", "the newest block"])
def test_a_reduction_overtaken_by_a_write_is_not_kept(values, monkeypatch, where):
    """A view read on another thread (the web's rule preview) while the loop ingests: here a late
    sample lands in a block between the view reading it and the view keeping what it read. What
    it read is used once and not kept, so the next view answers from the values as they are."""
    store = _store(values, 250)
    size, zero, head = store.sums.block_slots, store.slot_of(_at(0)), store.slot_of(_at(250))
    inside = store.slot_of(_at(250 - SLOTS // 2))  # a slot well inside the window
    first = (inside if where == "a whole block" else head) // size * size
    last = first + size - 1 if where == "a whole block" else head
    slot = first - zero  # the same slot counted from the test's start
    # A reading is taken back (a late unmeasured sample overwrites it): counts and sums both move.
    late = values[slot].copy()
    late[int(np.flatnonzero(~np.isnan(late))[0])] = np.nan
    piece = window_view.WindowView._piece
    done: list[bool] = []

    def overtaken(self, m, key, a, b):  # type: ignore[no-untyped-def]
        out = piece(self, m, key, a, b)
        if (a, b) == (first, last) and not done:
            done.append(True)
            store.ingest_arrays(_at(slot), {UTIL: late})  # the loop's write, after the read
        return out

    monkeypatch.setattr(window_view.WindowView, "_piece", overtaken)
    store.view(_at(250)).mean(UTIL, 1800.0)
    assert done
    monkeypatch.setattr(window_view.WindowView, "_piece", piece)
    fresh = _store(values, 250, start=250 - SLOTS)
    fresh.ingest_arrays(_at(slot), {UTIL: late})
    got, want = store.view(_at(250)).mean(UTIL, 1800.0), fresh.view(_at(250)).mean(UTIL, 1800.0)
    np.testing.assert_array_equal(got, want)
