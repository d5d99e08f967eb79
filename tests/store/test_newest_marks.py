"""``below_for_s`` read through the marks the window store keeps between looks, in the cases
that make a kept answer wrong: a new holder, a late sample lowering a value, the window moving
past the kept slot, a GPU first seen after the mark; each against a fresh store's answer."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np

from gpusteward.domain.models import Metric, Sample
from gpusteward.store.window import WindowStore
from gpusteward.store.window_view import WindowView

STEP = 60.0
T0 = datetime(2026, 1, 1, tzinfo=UTC)
UTIL = Metric.GPU_UTIL


def _at(slot: int) -> datetime:
    return T0 + timedelta(seconds=slot * STEP)


def _store(slots: int = 10) -> WindowStore:
    return WindowStore(slots * STEP, STEP, metrics=(UTIL,))


def _below(store: WindowStore, slot: int) -> list[float]:
    return [float(x) for x in store.view(_at(slot)).below_for_s(UTIL, 50.0)]


def _fresh(history: list[tuple[int, list[Sample], dict[str, str] | None]], slot: int) -> list[float]:
    """The same ingests into a store that was never looked at: nothing kept."""
    store = _store()
    for at, batch, holders in history:
        store.ingest(_at(at), batch, holders)
    return _below(store, slot)


def _run(
    steps: list[tuple[int, list[Sample], dict[str, str] | None]],
) -> list[tuple[list[float], list[float]]]:
    store, seen, out = _store(), [], []
    for step in steps:
        store.ingest(_at(step[0]), step[1], step[2])
        seen.append(step)
        out.append((_below(store, step[0]), _fresh(seen, step[0])))
    return out


def _s(gpu: str, slot: int, util: float | None) -> Sample:
    return Sample(gpu, _at(slot), gpu_util_pct=util)


def test_a_new_holder_forgets_the_busy_slot_of_the_old_one():
    got = _run(
        [
            (1, [_s("g", 1, 80.0)], {"g": "a"}),
            (2, [_s("g", 2, 10.0)], {"g": "a"}),
            (3, [_s("g", 3, 10.0)], {"g": "b"}),  # b's history starts here, all below
        ]
    )
    assert got[1][0] == got[1][1] == [60.0]
    assert got[2][0] == got[2][1] == [60.0]  # one sample of b: its interval, not since a's 80


def test_a_late_sample_that_lowers_the_kept_slot_is_searched_again():
    got = _run(
        [
            (3, [_s("g", 1, 90.0), _s("g", 2, 80.0), _s("g", 3, 10.0)], None),
            (4, [_s("g", 2, 10.0), _s("g", 4, 10.0)], None),  # slot 2 rewritten below 50
            (5, [_s("g", 2, None), _s("g", 5, 10.0)], None),  # and then unmeasured
        ]
    )
    assert got[0][0] == got[0][1] == [60.0]  # since slot 2
    assert got[1][0] == got[1][1] == [180.0]  # since slot 1 now
    assert got[2][0] == got[2][1] == [240.0]


def test_the_kept_slot_leaves_the_window():
    steps = [(1, [_s("g", 1, 80.0)], None)] + [(k, [_s("g", k, 10.0)], None) for k in range(2, 16)]
    for k, (kept, fresh) in enumerate(_run(steps)):
        assert kept == fresh, k
    assert _run(steps)[-1][0] == [600.0]  # 80 gone: the whole window below


def test_gpus_first_seen_after_the_mark_and_many_ticks_between_looks():
    store = _store()
    store.ingest(_at(1), [_s("a", 1, 90.0)])
    assert _below(store, 1) == [0.0]
    history = [(1, [_s("a", 1, 90.0)], None)]
    for k in range(2, 9):
        batch = [_s("a", k, 20.0), _s("b", k, 70.0 if k == 4 else 5.0), _s("c", k - 1, 60.0)]
        store.ingest(_at(k), batch)
        history.append((k, batch, None))
    kept, fresh = _below(store, 8), _fresh(history, 8)
    assert kept == fresh
    assert kept[:2] == [420.0, 240.0]
    assert not any(math.isnan(x) for x in kept)
    np.testing.assert_array_equal(store.view(_at(8)).below_for_s(UTIL, 50.0), np.asarray(fresh))


def test_a_search_overtaken_by_a_write_is_not_kept(monkeypatch):
    """A view searching on another thread (the web's rule preview) while the loop ingests: here a
    late sample lowers the slot the search found, after the search read it. What it found is used
    once and not kept, so the next look answers from the values as they are."""
    history: list[tuple[int, list[Sample], dict[str, str] | None]] = [
        (k, [_s("g", k, 90.0 if k == 3 else 10.0)], None) for k in range(1, 6)
    ]
    store = _store()
    for at, batch, holders in history:
        store.ingest(_at(at), batch, holders)
    search = WindowView._search
    done: list[bool] = []

    def overtaken(self, m, x, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = search(self, m, x, *args, **kwargs)
        if x == 50.0 and not done:  # the search for the newest slot >= 50 has read slot 3
            done.append(True)
            store.ingest(_at(5), [_s("g", 3, 10.0)])  # the loop's write: slot 3 no longer >= 50
        return out

    monkeypatch.setattr(WindowView, "_search", overtaken)
    assert _below(store, 5) == [120.0]  # the racing look: since slot 3, as it read
    assert done
    monkeypatch.setattr(WindowView, "_search", search)
    history.append((5, [_s("g", 3, 10.0)], None))
    assert _below(store, 5) == _fresh(history, 5) == [300.0]  # the whole window below 50
