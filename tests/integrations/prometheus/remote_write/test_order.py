"""The series order (``order.py``): a request read by following the order a sender's series
came in is read as a look-up of each series reads it, and a guess is taken only where the
bytes prove it."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusteward.integrations.prometheus.remote_write import Receiver, decode, encode
from gpusteward.integrations.prometheus.remote_write.order import SKIP, UNKNOWN, SeriesOrder

T0 = 1_760_000_000_000  # ms
UTIL = "DCGM_FI_DEV_GPU_UTIL"


def _labels(k: int) -> dict[str, str]:
    """Series ``k`` of six: three GPUs; 3-5 are 0-2 with a label more, whose encoded labels
    start with 0-2's whole; 5 is of a metric the receiver skips."""
    labels = {"__name__": "node_load1" if k == 5 else UTIL, "UUID": f"GPU-{k % 3}"}
    return labels | {"pod": "p"} if k >= 3 else labels


def _body(entries: list[tuple[int, int, float]]) -> bytes:
    """One sample per series entry, as the senders write them: (series, time ms, value)."""
    return encode((_labels(k), [(t, v)]) for k, t, v in entries)


def test_a_learnt_order_is_followed_in_runs_and_only_where_the_bytes_match() -> None:
    order = SeriesOrder(epoch=3)
    order.learn([b"ab", b"cd", b"ef", b"gh"], np.array([0, SKIP, 2, UNKNOWN], dtype=np.intp))

    def follow(series: list[bytes], cuts: list[int]) -> object:
        got = order.follow(series, np.array(cuts, dtype=np.intp))
        return None if got is None else (got[0].tolist(), got[1])

    assert follow([b"cd..", b"ef..", b"ab.."], [2, 2, 2]) == ([SKIP, 2, 0], [b"cd", b"ef", b"ab"])
    assert follow([b"ab..", b"cdx.."], [2, 3]) is None  # starts with cd, but is longer: not cd
    assert follow([b"ab..", b"cx.."], [2, 2]) is None  # as long as cd, other bytes
    assert follow([b"xy.."], [2]) is None  # never met
    assert follow([b"ef..", b"gh.."], [2, 2]) is None  # gh's fate is not known
    order.learn([b"cd", b"ab"], np.array([SKIP, 0], dtype=np.intp))  # a new order: cd, ab
    assert follow([b"cd..", b"ab.."], [2, 2]) == ([SKIP, 0], [b"cd", b"ab"])
    assert not order.full(3)
    assert SeriesOrder(0, limit=8).full(9)


def test_a_sender_cutting_its_stream_elsewhere_is_followed_not_looked_up() -> None:
    """Twenty series sent in the same order each scrape, cut into requests at other places:
    after the first look-up, every request is read from the order, with the look-up's numbers."""
    series = [{"__name__": UTIL, "UUID": f"GPU-{i}", "pod": "x" * 60} for i in range(20)]
    rx = Receiver([UTIL], clock=lambda: T0 / 1000)
    rx.receive(encode((lb, [(T0, 1.0)]) for lb in series))
    numbers = {lb["UUID"]: rx._ids[k] for lb, k in zip(series, rx._keys, strict=True)}
    for cut in (3, 7, 11):
        for part, t in ((series[:cut], T0 + cut), (series[cut:], T0 + cut)):
            body = encode((lb, [(t, float(cut % 2))]) for lb in part)
            req = decode(body, 1 << 24, rx._ids, rx._unwanted, rx._order)
            assert req.followed
            assert req.found is not None
            assert req.found.tolist() == [numbers[lb["UUID"]] for lb in part]
            rx.receive(body)
    assert rx.stats.accepted == 20 * 4


@settings(max_examples=300, deadline=None)
@given(
    st.permutations(range(6)),
    st.lists(st.integers(1, 9), min_size=1, max_size=8),
    st.lists(st.sampled_from([0.0, 1.0, 2.5]), min_size=48, max_size=48),
    st.sets(st.integers(0, 47), max_size=6),
)
def test_a_receiver_following_the_order_keeps_what_one_looking_up_each_series_keeps(
    base: list[int], cuts: list[int], values: list[float], swapped: set[int]
) -> None:
    """A sender's stream (its series in one order, scrape after scrape) cut into requests, with
    some entries another series (one whose labels extend or are cut from the guessed one's):
    a receiver that follows its order accepts, skips and numbers as one made to look each
    series up."""
    stream = [base[e % 6] for e in range(48)]
    stream = [(k + 3) % 6 if e in swapped else k for e, k in enumerate(stream)]
    entries = [(k, T0 + 1000 * (e // 6), values[e]) for e, k in enumerate(stream)]
    follows, looks = Receiver([UTIL], clock=lambda: T0 / 1000), Receiver([UTIL], clock=lambda: T0 / 1000)
    at, followed = 0, 0
    for size in cuts * 6:
        part, at = entries[at : at + size], at + size
        if not part:
            break
        body = _body(part)
        followed += decode(body, 1 << 24, follows._ids, follows._unwanted, follows._order).followed
        follows.receive(body)
        looks._order = SeriesOrder(looks._epoch)  # nothing learnt: every request looked up
        looks.receive(body)
    assert follows.stats == looks.stats
    assert follows._ids == looks._ids
    got, want = follows.drain(), looks.drain()
    assert [s.labels for s in got] == [s.labels for s in want]
    packed = [[(t, struct.pack("<d", v)) for t, v in s.points] for s in got]
    assert packed == [[(t, struct.pack("<d", v)) for t, v in s.points] for s in want]
    if not swapped and len(cuts) > 1:
        assert followed  # a stream in one order is followed after its first requests


@pytest.mark.parametrize("forget", [True, False])
def test_series_numbered_again_start_a_new_order(forget: bool) -> None:
    """A prune that numbers series again starts the order afresh; one that forgets nothing keeps it."""
    now = [T0 / 1000]
    rx = Receiver([UTIL], clock=lambda: now[0], forget_after_s=60)
    rx.receive(_body([(0, T0, 1.0), (1, T0, 1.0)]))
    later = T0 + (120_000 if forget else 10_000)
    rx.receive(_body([(1, later, 1.0)]))
    now[0] = later / 1000
    before = rx._order
    rx.drain_batch()
    assert (rx._order is not before) == forget
    assert rx._order.epoch == rx._epoch
    req = decode(_body([(1, later + 1, 2.0)]), 1 << 24, rx._ids, rx._unwanted, rx._order)
    assert req.found is not None
    assert req.found.tolist() == [rx._ids[req.labels[0]]]


def test_a_series_first_met_without_a_sample_is_looked_up_when_one_comes() -> None:
    """Met with no sample, a series' fate is not known: the order is no proof that a later
    request's sample of it is to be skipped."""
    rx = Receiver([UTIL], clock=lambda: T0 / 1000)
    rx.receive(encode([(_labels(0), [(T0, 1.0)]), (_labels(1), [])]))
    rx.receive(_body([(0, T0 + 1000, 1.0), (1, T0 + 1000, 2.0)]))
    assert rx.stats.accepted == 3
    assert sorted(s.labels["UUID"] for s in rx.drain()) == ["GPU-0", "GPU-1"]
