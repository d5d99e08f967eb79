"""``watched_s`` read through the oldest marks the window store keeps between looks, in the cases
that make a kept answer wrong: a late sample older than the kept slot, the kept slot rewritten as
unmeasured, a new holder, the window moving past the kept slot, a GPU first seen after the mark
and one with no sample at all; each against a store that was never looked at, and by value."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gpusteward.domain.models import Metric, Sample
from gpusteward.store.window import WindowStore
from gpusteward.store.window_view import WindowView

STEP = 60.0
T0 = datetime(2026, 1, 1, tzinfo=UTC)
UTIL = Metric.GPU_UTIL
Step = tuple[int, list[Sample], dict[str, str] | None]


def _at(slot: int) -> datetime:
    return T0 + timedelta(seconds=slot * STEP)


def _s(gpu: str, slot: int, util: float | None) -> Sample:
    return Sample(gpu, _at(slot), gpu_util_pct=util)


def _store() -> WindowStore:
    return WindowStore(10 * STEP, STEP, metrics=(UTIL,))


def _look(store: WindowStore, slot: int) -> list[float]:
    view = store.view(_at(slot))
    return [float(x) for x in view.watched_s(UTIL)] + [float(x) for x in view.below_for_s(UTIL, 50.0)]


def _fresh(history: list[Step], slot: int) -> list[float]:
    store = _store()
    for at, batch, holders in history:
        store.ingest(_at(at), batch, holders)
    return _look(store, slot)


def _run(steps: list[Step]) -> list[list[float]]:
    """Each step ingested, then looked at through the kept marks; asserts the fresh answer."""
    store, seen, out = _store(), [], []
    for k, step in enumerate(steps):
        store.ingest(_at(step[0]), step[1], step[2])
        seen.append(step)
        kept, fresh = _look(store, step[0]), _fresh(seen, step[0])
        assert np.array_equal(kept, fresh, equal_nan=True), (k, kept, fresh)
        out.append(kept)
    return out


def test_a_gpu_silent_at_the_window_start_keeps_its_oldest_slot_until_a_late_sample_precedes_it():
    steps: list[Step] = [(k, [_s("g", k, 10.0 if k >= 5 else None)], None) for k in range(1, 9)]
    steps.append((9, [_s("g", 3, 10.0), _s("g", 9, 10.0)], None))  # late, before the kept slot 5
    got = _run(steps)
    assert got[7][0] == 4 * STEP  # slots 5..8 watched at slot 8
    assert got[8][0] == 7 * STEP  # from slot 3 now, at slot 9


def test_the_kept_slot_rewritten_as_unmeasured_moves_the_oldest_on():
    steps: list[Step] = [(4, [_s("g", k, 10.0) for k in (2, 3, 4)], None)]
    steps.append((5, [_s("g", 2, None), _s("g", 5, 10.0)], None))  # slot 2 now unmeasured
    assert [x[0] for x in _run(steps)] == [3 * STEP, 3 * STEP]  # from slot 3 at slot 5


def test_a_new_holder_starts_the_watch_again():
    steps: list[Step] = [(k, [_s("g", k, 10.0)], {"g": "a"}) for k in range(1, 5)]
    steps += [(k, [_s("g", k, 10.0)], {"g": "b"}) for k in range(5, 8)]
    got = _run(steps)
    assert got[3][0] == 4 * STEP
    assert got[-1][0] == 3 * STEP


def test_the_window_moves_past_the_kept_slot_and_gaps_are_searched_across():
    # Samples at every third slot only: each time the kept one leaves, the next is two slots on.
    steps: list[Step] = [(k, [_s("g", k, 10.0 if k % 3 == 0 else None)], None) for k in range(1, 30)]
    got = _run(steps)
    assert got[-1][0] == 9 * STEP  # slot 21 is the oldest sample inside slots 20..29


def test_gpus_first_seen_after_the_mark_and_gpus_never_measured():
    steps: list[Step] = [(1, [_s("a", 1, 10.0), _s("b", 1, None)], None)]
    for k in range(2, 9):
        batch = [_s("a", k, 10.0), _s("b", k, 10.0 if k >= 6 else None)]
        if k >= 4:
            batch.append(_s("c", k - 1, 20.0))  # first seen at slot 4, with a sample of slot 3
        steps.append((k, batch, None))
    got = _run(steps)
    assert got[3][0] == 4 * STEP
    assert math.isnan(got[3][1])
    assert got[-1][:3] == [8 * STEP, 3 * STEP, 6 * STEP]


def test_many_ticks_between_looks():
    store, history = _store(), []
    for k in range(1, 40):
        batch = [_s("g", k, 10.0 if (k % 7) in (0, 1) else None), _s("h", k, 10.0 if k > 25 else None)]
        store.ingest(_at(k), batch)
        history.append((k, batch, None))
        if k % 6 == 0 or k == 39:
            assert np.array_equal(_look(store, k), _fresh(history, k), equal_nan=True), k


@pytest.mark.parametrize("late_slot", [2, 4])
def test_an_oldest_search_overtaken_by_a_write_is_not_kept(monkeypatch, late_slot):
    """A view searching on another thread (the web's rule preview) while the loop ingests: a late
    sample lands before the slot the search found, after the search read past it. What it found
    is used once and not kept, so the next look answers from the values as they are."""
    history: list[Step] = [(k, [_s("g", k, 10.0 if k >= 5 else None)], None) for k in range(1, 7)]
    store = _store()
    for at, batch, holders in history:
        store.ingest(_at(at), batch, holders)
    search = WindowView._search
    done: list[bool] = []

    def overtaken(self, m, x, newest, *args):  # type: ignore[no-untyped-def]
        out = search(self, m, x, newest, *args)
        if not newest and not done:  # the search for the oldest present slot has found slot 5
            done.append(True)
            store.ingest(_at(6), [_s("g", late_slot, 10.0)])
        return out

    monkeypatch.setattr(WindowView, "_search", overtaken)
    assert store.view(_at(6)).watched_s(UTIL)[0] == 2 * STEP  # the racing look, as it read
    assert done
    monkeypatch.setattr(WindowView, "_search", search)
    history.append((6, [_s("g", late_slot, 10.0)], None))
    assert _look(store, 6) == _fresh(history, 6)
    assert _look(store, 6)[0] == (7 - late_slot) * STEP


def test_a_view_answer_is_not_changed_by_a_later_holder_change():
    """A kept mark is also the answer the view was given; a new holder clears the mark, not it."""
    store = _store()
    for k in range(1, 5):
        store.ingest(_at(k), [_s("g", k, 80.0)], {"g": "a"})
    view = store.view(_at(4))
    watched, last = view.watched_s(UTIL).copy(), view.last(UTIL).copy()
    answers = (view.watched_s(UTIL), view.last(UTIL), view.below_for_s(UTIL, 50.0))
    store.ingest(_at(5), [_s("g", 5, 10.0)], {"g": "b"})
    assert answers[0][0] == watched[0] == 4 * STEP
    assert answers[1][0] == last[0] == 80.0
    assert answers[2][0] == 0.0
    assert _look(store, 5)[0] == STEP
