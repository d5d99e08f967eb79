"""The window store: aggregates with gaps, ring wrap-around, holders, late data, growth."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gpusteward.domain.models import Metric, Sample
from gpusteward.store.window import WindowStore, WindowView

T0 = datetime(2026, 1, 1, tzinfo=UTC)  # a multiple of 10 s, so slot k starts at T0 + 10k
U = Metric.GPU_UTIL


def at(slot: float) -> datetime:
    return T0 + timedelta(seconds=10 * slot)


def slot0() -> int:
    return int(T0.timestamp()) // 10


def fill(store: WindowStore, series: dict[str, Sequence[float | None]], first: int = 0) -> None:
    """Ingest one sample per GPU per slot, ``first`` onwards; None = not measured."""
    length = max(len(v) for v in series.values())
    for k in range(length):
        samples = [Sample(u, at(first + k), gpu_util_pct=v[k]) for u, v in series.items() if k < len(v)]
        store.ingest(at(first + k), samples)


def one(view: WindowView, values: np.ndarray) -> float:
    assert values.shape == (len(view),)
    return float(values[0])


# --- aggregates over a gappy series ---------------------------------------------------

GAPPY = [1.0, 2.0, None, 4.0, None, 6.0]  # slots 0..5


@pytest.mark.parametrize(
    ("name", "call", "expected"),
    [
        ("mean all", lambda v: v.mean(U, 60), 13 / 4),
        ("mean last 20s", lambda v: v.mean(U, 20), 6.0),
        ("mean longer than data", lambda v: v.mean(U, 3600), 13 / 4),
        ("min", lambda v: v.min(U, 60), 1.0),
        ("max", lambda v: v.max(U, 60), 6.0),
        ("max last 30s ignores gap", lambda v: v.max(U, 30), 6.0),
        ("last", lambda v: v.last(U), 6.0),
        ("coverage all", lambda v: v.coverage(U, 60), 4 / 6),
        ("coverage 20s", lambda v: v.coverage(U, 20), 1 / 2),
        ("coverage beyond window counts the missing part", lambda v: v.coverage(U, 120), 4 / 12),
        ("fraction_below", lambda v: v.fraction_below(U, 3, 60), 2 / 4),
        ("mean of a gap only is NaN", lambda v: v.mean(U, 10), 6.0),
        ("slope per minute", lambda v: v.slope(U, 60), 6.0),
    ],
)
def test_aggregates_with_gaps(name: str, call: object, expected: float) -> None:
    store = WindowStore(window_s=60, interval_s=10, capacity=2)
    fill(store, {"g": GAPPY})
    view = store.view(at(5))
    assert callable(call)
    assert one(view, call(view)) == pytest.approx(expected), name


def test_range_is_open_at_the_start_and_closed_at_now() -> None:
    store = WindowStore(window_s=60, interval_s=10)
    fill(store, {"g": [10.0, 20.0, 30.0, 40.0]})
    # now = slot 3 start: "last 20 s" = slot starts in (10 s, 30 s] = slots 2 and 3.
    assert one(store.view(at(3)), store.view(at(3)).mean(U, 20)) == 35.0
    # A view in the middle of slot 3 sees the same slots.
    v = store.view(at(3.5))
    assert one(v, v.mean(U, 20)) == 35.0


def test_missing_data_is_nan_not_zero() -> None:
    store = WindowStore(window_s=60, interval_s=10)
    store.register(["seen", "silent"])
    fill(store, {"seen": [5.0, 5.0]})
    v = store.view(at(1))
    assert np.isnan(v.mean(U, 60)[1])
    assert np.isnan(v.last(U)[1])
    assert np.isnan(v.max(U, 60)[1])
    assert v.coverage(U, 60)[1] == 0.0
    assert v.age_s()[1] == math.inf
    assert v.mean(U, 60)[0] == 5.0


def test_negative_reading_is_stored_as_missing() -> None:
    store = WindowStore(window_s=60, interval_s=10)
    fill(store, {"g": [-1.0, 4.0]})
    v = store.view(at(1))
    assert one(v, v.coverage(U, 20)) == 0.5
    assert one(v, v.min(U, 20)) == 4.0


def test_metric_not_kept_reads_as_no_data() -> None:
    store = WindowStore(window_s=60, interval_s=10, metrics=(U,))
    fill(store, {"g": [1.0, 2.0]})
    v = store.view(at(1))
    assert np.isnan(v.mean(Metric.POWER, 60)[0])
    assert v.coverage(Metric.POWER, 60)[0] == 0.0
    assert np.isnan(v.below_for_s(Metric.POWER, 5)[0])


# --- the ring -------------------------------------------------------------------------


def test_wrap_around_keeps_only_the_window() -> None:
    store = WindowStore(window_s=60, interval_s=10)  # 6 slots
    fill(store, {"g": [float(i) for i in range(10)]})
    v = store.view(at(9))
    assert one(v, v.mean(U, 60)) == pytest.approx(6.5)  # 4..9
    assert one(v, v.min(U, 60)) == 4.0
    assert one(v, v.coverage(U, 60)) == 1.0
    # Segments split by the wrap (rows 4,5 then 0..3) reduce like one range.
    assert one(v, v.mean(U, 30)) == pytest.approx(8.0)


def test_skipped_slots_become_gaps() -> None:
    store = WindowStore(window_s=60, interval_s=10)
    fill(store, {"g": [1.0, 2.0, 3.0, 4.0]})  # slots 0..3
    fill(store, {"g": [9.0]}, first=8)  # jumps over 4..7; window is now slots 3..8
    v = store.view(at(8))
    assert one(v, v.coverage(U, 60)) == pytest.approx(2 / 6)
    assert one(v, v.mean(U, 60)) == pytest.approx((4.0 + 9.0) / 2)


def test_jump_beyond_the_window_clears_everything() -> None:
    store = WindowStore(window_s=60, interval_s=10)
    fill(store, {"g": [1.0] * 6})
    fill(store, {"g": [7.0]}, first=100)
    v = store.view(at(100))
    assert one(v, v.mean(U, 60)) == 7.0
    assert one(v, v.coverage(U, 60)) == pytest.approx(1 / 6)


def test_view_after_the_data_sees_a_gap() -> None:
    store = WindowStore(window_s=60, interval_s=10)
    fill(store, {"g": [1.0, 2.0, 3.0]})  # slots 0..2
    v = store.view(at(5))  # three silent slots since
    assert one(v, v.coverage(U, 60)) == 0.5
    assert one(v, v.age_s()) == 30.0
    assert np.isnan(one(v, v.mean(U, 20)))


# --- holders, late data ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("holders", "expected_mean", "expected_coverage"),
    [
        (["job-1", "job-1", "job-1", "job-2"], 9.0, 1 / 6),  # new holder: history cleared
        (["job-1", "job-1", "job-1", "job-1"], 3.0, 4 / 6),  # same holder: kept
        (["job-1", "job-1", "job-1", ""], 9.0, 1 / 6),  # released: the idle time is nobody's
        ([None, None, None, "job-1"], 3.0, 4 / 6),  # first time told: nothing to forget
    ],
)
def test_holder_change_clears_history(
    holders: list[str | None], expected_mean: float, expected_coverage: float
) -> None:
    store = WindowStore(window_s=60, interval_s=10)
    for k, (holder, value) in enumerate(zip(holders, [1.0, 1.0, 1.0, 9.0], strict=True)):
        store.ingest(
            at(k), [Sample("g", at(k), gpu_util_pct=value)], None if holder is None else {"g": holder}
        )
    v = store.view(at(3))
    assert one(v, v.mean(U, 60)) == pytest.approx(expected_mean)
    assert one(v, v.coverage(U, 60)) == pytest.approx(expected_coverage)


def test_late_samples_land_in_their_slot() -> None:
    store = WindowStore(window_s=60, interval_s=10)
    fill(store, {"g": [1.0, None, 3.0]})  # slot 1 missing
    store.ingest(at(3), [Sample("g", at(1), gpu_util_pct=2.0), Sample("g", at(3), gpu_util_pct=4.0)])
    store.ingest(at(3), [Sample("g", at(-10), gpu_util_pct=100.0)])  # older than the window
    v = store.view(at(3))
    assert one(v, v.coverage(U, 40)) == 1.0
    assert one(v, v.mean(U, 40)) == pytest.approx(2.5)
    assert one(v, v.max(U, 60)) == 4.0


def test_late_sample_from_the_previous_holder_is_dropped() -> None:
    store = WindowStore(window_s=60, interval_s=10)
    store.ingest(at(0), [Sample("g", at(0), gpu_util_pct=1.0)], {"g": "old"})
    store.ingest(at(2), [Sample("g", at(2), gpu_util_pct=50.0)], {"g": "new"})
    store.ingest(at(3), [Sample("g", at(1), gpu_util_pct=0.0)], {"g": "new"})
    v = store.view(at(3))
    assert one(v, v.min(U, 60)) == 50.0


# --- GPUs -----------------------------------------------------------------------------


def test_growth_keeps_data_and_order() -> None:
    store = WindowStore(window_s=60, interval_s=10, capacity=2)
    fill(store, {"a": [1.0, 2.0], "b": [3.0, 4.0]})
    idx = store.register(["c", "a", "d", "e"])
    assert idx.tolist() == [2, 0, 3, 4]
    assert store.uuids == ("a", "b", "c", "d", "e")
    assert len(store) == 5
    assert store.index_of("d") == 3
    assert store.index_of("zzz") is None
    fill(store, {"e": [7.0]}, first=2)
    v = store.view(at(2))
    assert v.last(U).tolist()[:2] == [2.0, 4.0]
    assert v.last(U)[4] == 7.0
    assert np.isnan(v.last(U)[2])
    assert v.indices_of(["e", "nope", "a"]).tolist() == [4, -1, 0]


def test_ingest_arrays_matches_ingest() -> None:
    rng = np.random.default_rng(7)
    data = rng.uniform(0, 100, size=(9, 3)).astype(np.float32)
    data[rng.random(data.shape) < 0.3] = np.nan
    slow = WindowStore(window_s=60, interval_s=10)
    fast = WindowStore(window_s=60, interval_s=10)
    fast.register(["a", "b", "c"])
    for k, row in enumerate(data):
        slow.ingest(
            at(k),
            [
                Sample(u, at(k), gpu_util_pct=None if np.isnan(x) else float(x))
                for u, x in zip("abc", row, strict=True)
            ],
        )
        fast.ingest_arrays(at(k), {U: row})
    vs, vf = slow.view(at(8)), fast.view(at(8))
    np.testing.assert_allclose(vs.mean(U, 60), vf.mean(U, 60))
    np.testing.assert_allclose(vs.coverage(U, 30), vf.coverage(U, 30))
    np.testing.assert_allclose(vs.last(U), vf.last(U))


def test_ingest_arrays_rejects_misaligned_arrays() -> None:
    store = WindowStore(window_s=60, interval_s=10)
    store.register(["a", "b"])
    with pytest.raises(ValueError, match="shape"):
        store.ingest_arrays(at(0), {U: np.zeros(3)})


def test_rows_record_their_slots() -> None:
    store = WindowStore(window_s=60, interval_s=10)
    fill(store, {"g": [1.0] * 4})
    fill(store, {"g": [2.0]}, first=9)  # wraps and skips
    head = store.head_slot
    assert head == slot0() + 9
    assert sorted(store.row_slots.tolist()) == list(range(head - 5, head + 1))
    assert all(s % 6 == row for row, s in enumerate(store.row_slots.tolist()))


def test_memory_per_gpu_per_metric() -> None:
    store = WindowStore(window_s=1800, interval_s=10)
    assert store.n_slots == 180
    assert store.bytes_per_gpu_per_metric == 720
    assert WindowStore(window_s=3600, interval_s=10).bytes_per_gpu_per_metric <= 2048


def test_aggregates_are_memoised_and_read_only() -> None:
    store = WindowStore(window_s=60, interval_s=10)
    fill(store, {"g": [1.0, 2.0]})
    v = store.view(at(1))
    first = v.mean(U, 60)
    assert v.mean(U, 60) is first
    with pytest.raises(ValueError, match="read-only"):
        first[0] = 0.0


# --- below_for and age ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected_s"),
    [
        ([50.0, 3.0, 3.0, 3.0], 30.0),  # busy at slot 0, below since: now - slot 0
        ([3.0, 3.0, 3.0, 3.0], 40.0),  # never busy: since the oldest sample's interval began
        ([None, 3.0, 3.0, 3.0], 30.0),
        ([3.0, 3.0, 3.0, 50.0], 0.0),  # busy right now
        ([3.0, 3.0, 50.0, None], 0.0),  # newest present sample is busy
        ([50.0, None, 3.0, None], 30.0),  # gaps do not break the run
        ([None, None, None, None], math.nan),
    ],
)
def test_below_for(values: list[float | None], expected_s: float) -> None:
    store = WindowStore(window_s=60, interval_s=10)
    store.register(["g"])
    fill(store, {"g": values})
    v = store.view(at(3))
    got = one(v, v.below_for_s(U, 10))
    if math.isnan(expected_s):
        assert math.isnan(got)
    else:
        assert got == expected_s


def test_age_is_from_the_newest_sample_of_any_metric() -> None:
    store = WindowStore(window_s=120, interval_s=10)
    store.ingest(at(0), [Sample("a", at(0), gpu_util_pct=1.0), Sample("b", at(0), gpu_util_pct=1.0)])
    store.ingest(at(4), [Sample("a", at(4), power_w=80.0)])
    v = store.view(at(9))
    assert v.age_s().tolist() == [50.0, 90.0]


# --- against a plain reference, many GPUs, wrap-around and blocks ------------------------


def _reference(
    history: dict[int, float], head: int, n_slots: int, now_slot: int, d_slots: int
) -> list[float]:
    lo = max(now_slot - d_slots + 1, head - n_slots + 1)
    return [history[s] for s in range(lo, min(now_slot, head) + 1) if s in history]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_matches_a_plain_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_gpus, n_slots = 40, 30  # several blocks of rows; a few GPUs go silent
    store = WindowStore(window_s=n_slots * 10, interval_s=10, capacity=4)
    uuids = [f"g{i}" for i in range(n_gpus)]
    store.register(uuids)  # silent GPUs too: they must read as no data
    history: dict[str, dict[int, float]] = {u: {} for u in uuids}
    busy = rng.random(n_gpus) < 0.5
    silent = set(rng.choice(n_gpus, 3, replace=False).tolist())
    slot = 0
    for _ in range(int(rng.integers(40, 80))):
        slot += int(rng.choice([1, 1, 1, 2, 4]))
        samples = []
        for i, u in enumerate(uuids):
            if i in silent or rng.random() < 0.2:
                continue
            value = float(rng.uniform(20, 100) if busy[i] and rng.random() < 0.7 else rng.uniform(0, 9))
            samples.append(Sample(u, at(slot), gpu_util_pct=value))
            history[u][slot] = float(np.float32(value))
        store.ingest(at(slot), samples)
    head = slot
    for now_slot in (head, head + 3):
        v = store.view(at(now_slot) + timedelta(seconds=5))
        for d_slots in (3, 12, 13, 25, n_slots, 2 * n_slots):
            d = d_slots * 10.0
            for i, u in enumerate(uuids):
                vals = _reference(history[u], head, n_slots, now_slot, d_slots)
                cov = len(vals) / d_slots
                assert v.coverage(U, d)[i] == pytest.approx(cov)
                if vals:
                    assert v.mean(U, d)[i] == pytest.approx(sum(vals) / len(vals), rel=1e-5)
                    assert v.min(U, d)[i] == min(vals)
                    assert v.max(U, d)[i] == max(vals)
                    assert v.fraction_below(U, 10, d)[i] == pytest.approx(
                        sum(x < 10 for x in vals) / len(vals)
                    )
                else:
                    assert np.isnan(v.mean(U, d)[i])
        now_s = (slot0() + now_slot) * 10 + 5
        for i, u in enumerate(uuids):
            window = {s: x for s, x in history[u].items() if s > head - n_slots and s <= now_slot}
            got = v.below_for_s(U, 10)[i]
            if not window:
                assert np.isnan(got)
                assert np.isnan(v.last(U)[i])
                continue
            newest = max(window)
            assert v.last(U)[i] == window[newest]
            ge = [s for s, x in window.items() if x >= 10]
            if window[newest] >= 10:
                want = 0.0
            else:
                want = now_s - (slot0() + max(ge)) * 10 if ge else now_s - (slot0() + min(window) - 1) * 10
            assert got == pytest.approx(want)


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_prefetch_computes_the_same_values(workers: int) -> None:
    rng = np.random.default_rng(5)
    store = WindowStore(window_s=300, interval_s=10)
    store.register([f"g{i}" for i in range(50)])
    for k in range(40):
        row = rng.uniform(0, 100, 50).astype(np.float32)
        row[rng.random(50) < 0.2] = np.nan
        store.ingest_arrays(at(k), {U: row, Metric.MEM_USED: row * 10, Metric.PROC_CPU: row / 2})
    calls = [
        ("mean", U, (300.0,)),
        ("coverage", U, (60.0,)),
        ("max", U, (120.0,)),
        ("min", Metric.PROC_CPU, (120.0,)),
        ("last", Metric.MEM_USED, ()),
        ("below_for_s", U, (50.0,)),
        ("fraction_below", U, (30.0, 300.0)),
        ("slope", Metric.PROC_CPU, (300.0,)),
    ]
    ahead = store.view(at(39))
    ahead.prefetch(calls, workers=workers)
    fresh = store.view(at(39))
    for method, m, args in calls:
        np.testing.assert_array_equal(getattr(ahead, method)(m, *args), getattr(fresh, method)(m, *args))
    np.testing.assert_array_equal(ahead.age_s(), fresh.age_s())


def test_lookup_answers_an_equal_list_from_memory_and_never_memoises_an_unknown_gpu():
    store = WindowStore(window_s=600, interval_s=60)
    store.register(["a", "b", "c"])
    first = store.lookup(["c", "a"])
    assert first.tolist() == [2, 0]
    assert store.lookup(["c", "a"]) is first  # an equal list (a new object): the same answer
    with pytest.raises(ValueError, match="read-only"):
        first[0] = 1  # shared by every caller: nobody may change it
    assert store.lookup(["a", "z"]).tolist() == [0, -1]
    store.register(["z"])
    assert store.lookup(["a", "z"]).tolist() == [0, 3]  # not the -1 of before it was seen
    view = store.view(datetime(2026, 1, 1, tzinfo=UTC))
    store.register(["late"])  # after the view was made: not in it
    assert view.indices_of(["late", "b"]).tolist() == [-1, 1]


def test_gpus_changing_hands_in_one_ingest_all_lose_their_history_and_only_theirs():
    store = WindowStore(window_s=600, interval_s=60, metrics=(Metric.GPU_UTIL, Metric.MEM_USED))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    gpus = ["a", "b", "c"]
    store.ingest(t0, [Sample(g, t0, gpu_util_pct=50.0) for g in gpus], dict.fromkeys(gpus, "w1"))
    t1 = t0 + timedelta(minutes=1)
    # a and b change hands at once (one batch of clears); c keeps its holder.
    store.ingest(
        t1,
        [Sample(g, t1, gpu_util_pct=10.0, mem_used_mib=5.0) for g in gpus],
        {"a": "w2", "b": "w3", "c": "w1"},
    )
    view = store.view(t1)
    count = view.coverage(Metric.GPU_UTIL, 600) * 10
    assert [round(float(count[view.index_of(g)])) for g in gpus] == [1, 1, 2]
    mem = view.coverage(Metric.MEM_USED, 600) * 10  # never written before the change: only t1
    assert [round(float(mem[view.index_of(g)])) for g in gpus] == [1, 1, 1]
