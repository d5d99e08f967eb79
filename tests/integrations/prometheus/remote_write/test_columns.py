"""The receiver's column paths against plain models of what they replace: a request walked as
columns (``walk``) is what protobuf parses, whatever the field order and encoding; the order
rules judged for a whole request are the per-sample rules of receiver.py's docstring; a drained
batch filed whole (``Assembler.add_batch``) folds as its series filed one by one."""

from __future__ import annotations

import math
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusteward.integrations.prometheus.assemble import Assembler
from gpusteward.integrations.prometheus.filing import Identities
from gpusteward.integrations.prometheus.parse import DEFAULT_SPECS, LabelMap
from gpusteward.integrations.prometheus.remote_write import Receiver, decode, encode, walk
from gpusteward.integrations.prometheus.remote_write.proto.remote_pb2 import WriteRequest
from gpusteward.integrations.prometheus.remote_write.proto.types_pb2 import Label, Sample
from gpusteward.integrations.prometheus.remote_write.receiver import MAX_AHEAD_MS
from gpusteward.integrations.prometheus.remote_write.wire import BadBody
from gpusteward.integrations.prometheus.remote_write.wire import labels as label_dict

T0 = 1_760_000_000_000  # ms
_value = st.one_of(st.sampled_from([0.0, -0.0, 1.5, math.nan, math.inf]), st.floats(allow_nan=False))
_time = st.one_of(st.sampled_from([0, T0, -5]), st.integers(-(2**63), 2**63 - 1))


def _varint(x: int) -> bytes:
    x &= 2**64 - 1
    out = bytearray()
    while True:
        b, x = x & 0x7F, x >> 7
        out.append(b | (0x80 if x else 0))
        if not x:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2]) + _varint(len(payload)) + payload


def _sample(value: float, t: int, how: str) -> bytes:
    """A Sample as an encoder may write it: as protobuf does (a 0 left out), fields reversed, a
    field unknown here, or the value twice (the last one counts)."""
    v, ts = b"\x09" + struct.pack("<d", value), b"\x10" + _varint(t)
    return {
        "plain": Sample(value=value, timestamp=t).SerializeToString(),
        "reversed": ts + v,
        "unknown": v + ts + b"\x18" + _varint(7),
        "twice": b"\x09" + struct.pack("<d", 42.0) + v + ts,
    }[how]


_label = st.tuples(st.sampled_from(["__name__", "UUID", "pod", "\u00e9"]), st.text("ab\u00e9x", max_size=3))
_how = st.sampled_from(["plain", "plain", "reversed", "unknown", "twice"])
_series = st.tuples(
    st.lists(_label, max_size=4, unique_by=lambda kv: kv[0]),
    st.lists(st.tuples(_value, _time, _how), max_size=4),
    st.sampled_from(["labels first", "a label last", "an exemplar", "a long label"]),
)
Drawn = list[tuple[list[tuple[str, str]], list[tuple[float, int, str]], str]]


def _body(series: Drawn) -> bytes:
    out = b""
    for labels, samples, shape in series:
        lbs = [_field(1, Label(name=k, value=v).SerializeToString()) for k, v in labels]
        if shape == "a long label":  # a length over 127: a two-byte varint
            lbs.append(_field(1, Label(name="long", value="x" * 200).SerializeToString()))
        sms = [_field(2, _sample(v, t, how)) for v, t, how in samples]
        if shape == "a label last" and lbs and sms:
            fields = lbs[:-1] + sms + lbs[-1:]
        else:
            fields = lbs + sms + ([_field(3, b"\x0a\x00")] if shape == "an exemplar" else [])
        out += _field(1, b"".join(fields))
    return bytes(cramjam.snappy.compress_raw(out))


@settings(max_examples=300, deadline=None)
@given(st.lists(_series, max_size=8))
def test_a_request_walked_as_columns_is_what_protobuf_parses(series: Drawn) -> None:
    body = _body(series)
    req = decode(body, 1 << 24)
    ref = WriteRequest.FromString(bytes(cramjam.snappy.decompress_raw(body)))
    expected = [{lb.name: lb.value for lb in ts.labels} for ts in ref.timeseries]
    assert [label_dict(key) for key in req.labels] == expected
    assert req.counts.tolist() == [len(ts.samples) for ts in ref.timeseries]
    assert req.t_ms.tolist() == [s.timestamp for ts in ref.timeseries for s in ts.samples]
    packed = [struct.pack("<d", v) for v in req.values.tolist()]
    assert packed == [struct.pack("<d", s.value) for ts in ref.timeseries for s in ts.samples]


def _reference(body: bytes) -> tuple[list[dict[str, str]], list[int], list[int], list[bytes]]:
    ref = WriteRequest.FromString(bytes(cramjam.snappy.decompress_raw(body)))
    return (
        [{lb.name: lb.value for lb in ts.labels} for ts in ref.timeseries],
        [len(ts.samples) for ts in ref.timeseries],
        [s.timestamp for ts in ref.timeseries for s in ts.samples],
        [struct.pack("<d", s.value) for ts in ref.timeseries for s in ts.samples],
    )


def _as_decoded(req: walk.Request) -> tuple[list[dict[str, str]], list[int], list[int], list[bytes]]:
    packed = [struct.pack("<d", v) for v in req.values.tolist()]
    return [label_dict(key) for key in req.labels], req.counts.tolist(), req.t_ms.tolist(), packed


#: As the senders write a series: its labels, then one sample (a time from 1971 to 2109 is
#: the shortcut's shape; the others, and a 0 value left out, are near it).
_sender_series = st.tuples(
    st.lists(_label, min_size=1, max_size=3, unique_by=lambda kv: kv[0]),
    st.tuples(_value, st.sampled_from([T0, 2**35, 2**35 - 1, 2**42 - 1, 2**42, 0]), st.just("plain")).map(
        lambda s: [s]
    ),
    st.just("labels first"),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(_series, _sender_series), max_size=6),
    st.lists(st.one_of(_series, _sender_series), max_size=6),
    st.sets(st.integers(0, 11)),
)
def test_a_request_of_series_met_before_is_still_what_protobuf_parses(
    before: Drawn, now: Drawn, skipped: set[int]
) -> None:
    """The known series' shortcut (walk._known), with what a receiver knows: the keys walks
    read from this request or another (some of them to skip). Whatever it takes, the answer is
    protobuf's; where it answers, each series' number is the one known."""
    keys = [k for body in (_body(before), _body(now)) for k in decode(body, 1 << 24).labels]
    known = {k: i for i, k in enumerate(dict.fromkeys(keys)) if i not in skipped}
    skip = {k for i, k in enumerate(dict.fromkeys(keys)) if i in skipped}
    body = _body(now)
    req = decode(body, 1 << 24, known, skip)
    assert _as_decoded(req) == _reference(body)
    if req.found is not None:
        assert req.found.tolist() == [known.get(k, -1) for k in req.labels]
        assert all(k in known or k in skip for k in req.labels)


def _decoded_or_bad(body: bytes, known: dict[bytes, int] | None = None) -> object:
    try:
        return _as_decoded(decode(body, 1 << 24, known))
    except BadBody:
        return BadBody


@settings(max_examples=400, deadline=None)
@given(st.booleans(), st.integers(0, 17), st.integers(0, 255))
def test_a_sample_unlike_the_senders_is_not_read_as_one(valued: bool, at: int, byte: int) -> None:
    """A known series' last sample with one byte changed (its tag, length, value's or time's
    tag, a timestamp byte): the shortcut answers as the walk does, or leaves it to the walk."""
    key = _field(1, Label(name="UUID", value="GPU-1").SerializeToString())
    tail = bytearray(_field(2, _sample(1.5 if valued else 0.0, T0, "plain")))
    assert len(tail) == (18 if valued else 9)
    tail[at % len(tail)] = byte
    body = bytes(cramjam.snappy.compress_raw(_field(1, key + bytes(tail))))
    assert _decoded_or_bad(body, {key: 0}) == _decoded_or_bad(body)


def test_series_met_before_are_read_from_their_ends_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    def walked(series: list[bytes]) -> None:
        raise AssertionError("walked")

    def body(value: float) -> bytes:  # a sample each, at a time of its own; half of them 0
        series = [
            {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": f"GPU-{i}", "pod": "x" * 150} for i in range(40)
        ]
        return encode((lb, [(T0 + int(value * 1000), value * (i % 2))]) for i, lb in enumerate(series))

    rx = Receiver(["DCGM_FI_DEV_GPU_UTIL"], clock=lambda: T0 / 1000)
    rx.receive(body(1.0))
    monkeypatch.setattr(walk, "_walk", walked)
    req = decode(body(2.5), 1 << 24, rx._ids)
    assert req.found is not None
    assert sorted(req.found.tolist()) == list(range(40))
    assert req.values.tolist() == [2.5 * (i % 2) for i in range(40)]
    rx.receive(body(2.5))
    assert rx.stats.accepted == 80
    with pytest.raises(AssertionError, match="walked"):  # a new series among them: walked
        decode(
            encode([({"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": "GPU-new"}, [(T0, 1.0)])]), 1 << 24, rx._ids
        )


def test_a_request_read_with_another_receivers_series_is_looked_up_again() -> None:
    """``push`` without the epoch of its look-up takes no number from the request: a receiver
    that never met its series numbers them."""
    body = encode(({"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": f"GPU-{i}"}, [(T0, 1.0)]) for i in range(3))
    first = Receiver(["DCGM_FI_DEV_GPU_UTIL"], clock=lambda: T0 / 1000)
    first.receive(body)
    req = decode(body, 1 << 24, first._ids)
    assert req.found is not None
    other = Receiver(["DCGM_FI_DEV_GPU_UTIL"], clock=lambda: T0 / 1000)
    assert other.push(req).accepted == 3
    assert sorted(s.labels["UUID"] for s in other.drain()) == ["GPU-0", "GPU-1", "GPU-2"]


def test_a_series_cut_short_is_a_bad_body() -> None:
    label = _field(1, Label(name="UUID", value="GPU-1").SerializeToString())
    inner = label + _field(2, _sample(1.0, T0, "plain"))
    for cut in (inner[:-3], inner[:3], inner + b"\x12\x40"):
        with pytest.raises(BadBody):
            decode(bytes(cramjam.snappy.compress_raw(_field(1, cut))), 1 << 24)


def _model(
    requests: list[list[tuple[int, int, float]]], limit_ms: int
) -> tuple[dict[int, list[tuple[int, float]]], list[int]]:
    """The order rules one sample at a time: kept points per series, and the counts
    (accepted, duplicates, out of order, too new)."""
    newest: dict[int, tuple[int, float]] = {}
    kept: dict[int, list[tuple[int, float]]] = {}
    counts = [0, 0, 0, 0]
    for req in requests:
        for k, t, v in req:
            if k == 4:
                continue
            nt, nv = newest.get(k, (-(2**63), math.nan))
            if t > nt:
                if t > limit_ms:
                    counts[3] += 1
                    continue
                newest[k] = (t, v)
                kept.setdefault(k, []).append((t, v))
                counts[0] += 1
            elif t == nt and (v == nv or (math.isnan(v) and math.isnan(nv))):
                counts[1] += 1
            else:
                counts[2] += 1
    return kept, counts


_point = st.tuples(
    st.integers(0, 4),  # series; the last of another metric, which the receiver skips
    st.sampled_from([T0 + 1000 * k for k in range(6)] + [T0 + 6000 + MAX_AHEAD_MS]),  # the last: too new
    st.sampled_from([1.0, 2.0, math.nan]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_point, max_size=8), max_size=5))
def test_a_request_is_judged_as_its_samples_one_by_one(requests: list[list[tuple[int, int, float]]]) -> None:
    now_s = (T0 + 5000) / 1000
    rx = Receiver(["DCGM_FI_DEV_GPU_UTIL"], clock=lambda: now_s)
    for req in requests:
        body = encode(
            ({"__name__": "node_load1" if k == 4 else "DCGM_FI_DEV_GPU_UTIL", "UUID": f"GPU-{k}"}, [(t, v)])
            for k, t, v in req
        )  # one series entry per sample: a series may come several times in one request
        rx.receive(body)  # series met in an earlier request take the known series' shortcut
    kept, counts = _model(requests, int(now_s * 1000) + MAX_AHEAD_MS)
    st_ = rx.stats
    assert [st_.accepted, st_.duplicates, st_.out_of_order, st_.too_new] == counts
    drained = {int(s.labels["UUID"][4:]): s.points for s in rx.drain()}
    expected = {k: [(t / 1000, v) for t, v in pts] for k, pts in kept.items()}
    assert drained.keys() == expected.keys()
    for k, pts in expected.items():
        assert [(t, struct.pack("<d", v)) for t, v in drained[k]] == [
            (t, struct.pack("<d", v)) for t, v in pts
        ]


_METRICS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "nvidia_smi_gpu_info",  # info: names a GPU, nothing to fold
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
)


def _series_labels(k: int, complete: bool) -> dict[str, str]:
    """Series ``k``: a metric, a GPU (k // 4), a pod; with its GPU's model and index or not."""
    labels = {"__name__": _METRICS[k % 4], "UUID": f"GPU-{k // 4}", "pod": f"p{k % 3}", "namespace": "ml"}
    if complete:
        labels |= {"modelName": "NVIDIA H100 80GB HBM3", "gpu": str(k // 4)}
    elif k % 2:  # part of the GPU's identity on some of its series only: they merge
        labels["gpu"] = str(k // 4)
    if k % 3 == 1:  # the node on some series only: the GPU is the first series' identity
        labels["Hostname"] = f"node-{k}"
    return labels


_batch_point = st.tuples(
    st.integers(0, 11),  # series: 3 GPUs x 4 metrics
    st.sampled_from([T0 + 1000 * k for k in range(3)]),
    st.sampled_from([1.0, 2.0, math.nan]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_batch_point, max_size=12), max_size=4), st.booleans(), st.booleans())
def test_a_batch_folds_as_its_series_one_by_one(
    requests: list[list[tuple[int, int, float]]], complete: bool, kept: bool
) -> None:
    """Whether each series is worked out afresh or taken from what earlier ticks kept (the
    numpy path, where every GPU's identity is complete), the same GPUs, series and slots."""
    rx = Receiver(list(_METRICS), clock=lambda: T0 / 1000)
    for req in requests:
        rx.push(decode(encode((_series_labels(k, complete), [(t, v)]) for k, t, v in req), 1 << 24))
    batch = rx.drain_batch()
    ids = Identities()
    if kept:  # an earlier tick filed the same series
        Assembler(DEFAULT_SPECS, LabelMap(), 10.0, identities=ids).add_batch(batch)
    whole = Assembler(DEFAULT_SPECS, LabelMap(), 10.0, identities=ids)
    one_by_one = Assembler(DEFAULT_SPECS, LabelMap(), 10.0)
    whole.add_batch(batch)
    for s in batch.series():
        one_by_one.add(s)
    assert list(whole.gpus.items()) == list(one_by_one.gpus.items())
    assert whole.series == one_by_one.series
    slots = [whole.slots(), one_by_one.slots()]
    assert [[(s.start_s, list(s.samples), dict(s.holders)) for s in slot] for slot in slots[:1]] == [
        [(s.start_s, list(s.samples), dict(s.holders)) for s in slot] for slot in slots[1:]
    ]


def test_a_request_as_the_senders_encode_it_is_walked_not_parsed_series_by_series(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def plain(raw: bytes, pb: object) -> None:
        raise AssertionError("took the one-series-at-a-time path")

    monkeypatch.setattr(walk, "_plain", plain)
    body = encode(
        (
            {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": f"GPU-{i}", "pod": "x" * 150},
            [(T0, float(i % 3)), (T0 + 1, 0.0)],
        )
        for i in range(50)
    )
    req = decode(body, 1 << 24)
    assert req.counts.tolist() == [2] * 50
    assert req.values.tolist()[:6] == [0.0, 0.0, 1.0, 0.0, 2.0, 0.0]
