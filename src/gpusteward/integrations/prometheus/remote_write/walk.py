"""A decompressed ``WriteRequest`` as columns, without a Python object per series or sample.

The upb runtime hands over each series as its encoded bytes (``WriteRequestFlat``). numpy then
walks the fields of every series at once, one field per step: the leading ``labels`` fields
(tag 0x0A) are the series' key, kept encoded, and the ``samples`` fields (tag 0x12) are read
in place, every sample's value and timestamp at once. What the walk does not expect (a label
after a sample, a tag over one byte, a Sample encoded in another field order) sends the request
down the plain path instead: upb's objects, one series at a time. Both give the same ``Request``.

Before either, a request whose series the receiver has all met before (``known``) is read from
the end of each series: a Prometheus sends one sample per series entry, whose bytes end the
series in one of two fixed shapes, so whatever precedes them is the series' labels, looked up
as they are. Only a lookup that finds them proves the guess (below), and any miss sends the
whole request down the walk. Before a look-up of each, the order the sender's series came in
(``order.py``) is followed: a series whose bytes are the guessed one's needs no look-up.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from itertools import repeat
from types import ModuleType

import numpy as np
import numpy.typing as npt

from gpusteward.integrations.prometheus.remote_write.order import SeriesOrder

IntArray = npt.NDArray[np.intp]
Bytes = npt.NDArray[np.uint8]
_LABEL, _SAMPLE = 0x0A, 0x12  # fields 1 and 2, length-delimited
_VALUE_TAG, _TIME_TAG = 0x09, 0x10  # a Sample's value (fixed64) and timestamp (varint)
_PAD = 16  # zero bytes after the buffer: a varint read may look past a field's end
_VALUE_BYTES = np.arange(1, 9)  # a fixed64 value after its tag
#: A Sample field that ends a series, as the senders write one: tag 0x12, its length, the
#: value (0x09 and 8 bytes; left out when 0) and the timestamp (0x10 and a varint: a time in
#: milliseconds from 1971 to 2109 takes 6 bytes). Its size with a value, and without.
_WITH_VALUE, _ZERO_VALUE = 18, 9
_STAMP = np.arange(-6, 0)  # the timestamp's bytes, from the series' end
_STAMP_SHIFTS = np.arange(0, 42, 7, dtype=np.int64)


class Malformed(ValueError):
    """The bytes are not a WriteRequest."""


class _Unexpected(Exception):
    """Valid protobuf the walk does not handle: take the plain path."""


@dataclass(frozen=True)
class Request:
    """Per series: its labels still encoded (its ``Label`` fields as on the wire: what tells one
    series from another) and how many samples it has; per sample, series after series in the
    order they came: its timestamp (ms) and value."""

    labels: list[bytes]
    counts: IntArray
    t_ms: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
    #: Read by the known series' shortcut: each series' value in ``known`` (or its number in
    #: the order followed), -1 for one to skip; None otherwise (then series may be new).
    found: IntArray | None = None
    #: Read by following the receiver's ``SeriesOrder``: nothing in it for the order to learn.
    followed: bool = False


def columns(
    raw: bytes | memoryview,
    pb: ModuleType,
    known: Mapping[bytes, int] | None = None,
    skip: Collection[bytes] = frozenset(),
    order: SeriesOrder | None = None,
) -> Request:
    """``raw`` (a decompressed WriteRequest) as a ``Request``; ``pb``: the generated remote_pb2.
    ``known`` and ``skip``: encoded labels a walk read before (the receiver's series, and those
    it skips): every key in them must be one, for the shortcut's proof; ``order``: the order
    the receiver met them in, tried before a look-up of each (``order.py``)."""
    try:
        series = list(pb.WriteRequestFlat.FromString(raw).timeseries)
    except Exception as e:  # google.protobuf.message.DecodeError
        raise Malformed(f"not a prometheus.WriteRequest: {e}") from e
    if known is not None and series:
        req = _known(series, known, skip, order)
        if req is not None:
            return req
    try:
        return _walk(series)
    except _Unexpected:
        return _plain(raw, pb)


def _known(
    series: list[bytes], known: Mapping[bytes, int], skip: Collection[bytes], order: SeriesOrder | None
) -> Request | None:
    """The request, if every series ends with one sample of the senders' shape and the bytes
    before it are a key of ``known`` or ``skip``; else None.

    Why a found key proves the guess: keys come only from walks, so a key is a whole run of
    label fields; the bytes after it were checked to be one whole Sample field, ending where
    the series ends. Protobuf bytes parse one way only, so the series is those labels and that
    sample, as the walk would have read it.
    """
    n = len(series)
    sizes = np.fromiter(map(len, series), dtype=np.intp, count=n)
    if int(sizes.min()) < _ZERO_VALUE:
        return None
    joined = b"".join(series)
    buf = np.frombuffer(joined, dtype=np.uint8)
    ends = np.cumsum(sizes)
    stamp = buf[ends[:, None] + _STAMP]
    timed = (buf[ends - 7] == _TIME_TAG) & (stamp[:, :5] >= 0x80).all(axis=1) & (stamp[:, 5] < 0x80)
    # Reads before a short series' start are masked by its size (a negative index wraps).
    valued = (
        (sizes >= _WITH_VALUE)
        & (buf[ends - 18] == _SAMPLE)
        & (buf[ends - 17] == _WITH_VALUE - 2)
        & (buf[ends - 16] == _VALUE_TAG)
    )
    zero = (buf[ends - 9] == _SAMPLE) & (buf[ends - 8] == _ZERO_VALUE - 2)
    if not (timed & (valued | zero)).all():
        return None
    cuts = sizes - np.where(valued, _WITH_VALUE, _ZERO_VALUE)
    followed = None if order is None else order.follow(series, cuts)
    if followed is not None:
        found, keys = followed
    else:
        keys = [s[:c] for s, c in zip(series, cuts.tolist(), strict=True)]
        found = np.fromiter(map(known.get, keys, repeat(-1)), dtype=np.intp, count=n)
        missing = np.flatnonzero(found < 0)
        if missing.size and not all(map(skip.__contains__, map(keys.__getitem__, missing.tolist()))):
            return None
    t_ms = (stamp.astype(np.int64) & 0x7F) << _STAMP_SHIFTS
    values = np.zeros(n, dtype=np.float64)
    if valued.any():
        payload = buf[(ends[valued] - 15)[:, None] + _VALUE_BYTES - 1]  # fixed64, little-endian
        values[valued] = np.ascontiguousarray(payload).view("<f8").reshape(-1)
    return Request(keys, np.ones(n, dtype=np.intp), t_ms.sum(axis=1), values, found, followed is not None)


def _walk(series: list[bytes]) -> Request:
    joined = b"".join([*series, b"\0" * _PAD])
    buf = np.frombuffer(joined, dtype=np.uint8)
    sizes = np.fromiter(map(len, series), dtype=np.intp, count=len(series))
    ends = np.cumsum(sizes)
    starts = ends - sizes
    labels_end = _labels_end(buf, starts, ends)
    owner, at, size = _samples(buf, labels_end, ends)
    keys = [joined[a:b] for a, b in zip(starts.tolist(), labels_end.tolist(), strict=True)]
    counts = np.bincount(owner, minlength=len(series)).astype(np.intp)
    t_ms, values = _sample_columns(buf, at, size)
    return Request(keys, counts, t_ms, values)


def _labels_end(buf: Bytes, starts: IntArray, ends: IntArray) -> IntArray:
    """Where each series' leading run of label fields ends."""
    pos = starts.copy()
    live = np.flatnonzero(pos < ends)
    while live.size:
        at = pos[live]
        label = buf[at] == _LABEL
        if not label.all():  # most series have as many labels as the others: none to drop
            live, at = live[label], at[label]
            if not live.size:
                break
        end = ends[live]
        size = buf[at + 1]
        if (size < 0x80).all():  # the common case: a label under 128 bytes, a one-byte length
            nxt = at + 2 + size
            if (nxt > end).any():
                raise Malformed("a field runs past the end of its series")
        else:
            nxt = _next_field(buf, at, end)[1]
        pos[live] = nxt
        going = nxt < end
        if not going.all():
            live = live[going]
    return pos


def _samples(buf: Bytes, pos: IntArray, ends: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """Every sample field after the labels: its series, where its payload starts, its size;
    grouped by series, in order within each. Other fields (exemplars, histograms) are skipped."""
    pos = pos.copy()
    owners, starts, sizes = [], [], []
    live = np.flatnonzero(pos < ends)
    while live.size:
        tag = buf[pos[live]]
        if (tag == _LABEL).any():  # a label after a sample: valid, but not this walk's
            raise _Unexpected
        payload, nxt = _next_field(buf, pos[live], ends[live])
        sample = tag == _SAMPLE
        if sample.any():
            owners.append(live[sample])
            starts.append(payload[sample])
            sizes.append(nxt[sample] - payload[sample])
        pos[live] = nxt
        live = live[nxt < ends[live]]
    if not owners:
        empty = np.zeros(0, dtype=np.intp)
        return empty, empty, empty
    owner = np.concatenate(owners)
    order = np.argsort(owner, kind="stable")  # each step took one field of every series
    return owner[order], np.concatenate(starts)[order], np.concatenate(sizes)[order]


def _next_field(buf: Bytes, pos: IntArray, ends: IntArray) -> tuple[IntArray, IntArray]:
    """Where the payload of the field at each ``pos`` starts, and where the field after it
    starts (checked against its series' end)."""
    tag = buf[pos]
    if (tag & 0x80).any():  # a field number over 15: no field of these messages
        raise _Unexpected
    wire = tag & 7
    if ((wire == 3) | (wire == 4) | (wire > 5)).any():  # groups: valid once, for upb to judge
        raise _Unexpected
    after = pos + 1
    value = np.zeros(pos.size, dtype=np.uint64)
    size = np.zeros(pos.size, dtype=np.intp)
    varint = (wire == 0) | (wire == 2)
    value[varint], size[varint] = _varint(buf, after[varint])
    if ((wire == 2) & (value > np.uint64(ends.max(initial=0)))).any():
        raise Malformed("a field is longer than its message")
    nxt = np.select(
        [wire == 0, wire == 1, wire == 2],
        [after + size, after + 8, after + size + value.astype(np.intp)],
        default=after + 4,  # wire type 5: fixed32
    )
    if (nxt > ends).any():
        raise Malformed("a field runs past the end of its series")
    return after + size, nxt


def _varint(buf: Bytes, pos: IntArray) -> tuple[npt.NDArray[np.uint64], IntArray]:
    """The varint at each ``pos``: its value and how many bytes it takes."""
    value = np.zeros(pos.size, dtype=np.uint64)
    size = np.zeros(pos.size, dtype=np.intp)
    going = np.ones(pos.size, dtype=np.bool_)
    for k in range(10):
        b = buf[np.minimum(pos + k, buf.size - 1)].astype(np.uint64)
        value[going] |= (b[going] & np.uint64(0x7F)) << np.uint64(7 * k)
        size += going
        going &= b >= 0x80
        if not going.any():
            return value, size
    raise Malformed("a varint longer than 10 bytes")


def _sample_columns(
    buf: Bytes, at: IntArray, size: IntArray
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The samples' timestamps and values, read straight from their payloads. A Sample as the
    senders encode it is its value (tag 0x09 and 8 bytes, left out when 0) then its timestamp
    (tag 0x10 and a varint, left out when 0); its size must be exactly what those take. Any
    other encoding (fields reversed or repeated, an unknown field) is for upb (``_plain``)."""
    n = at.size
    has_value = (size > 0) & (buf[at] == _VALUE_TAG)
    time_at = at + 9 * has_value
    has_time = (size > 9 * has_value) & (buf[time_at] == _TIME_TAG)
    expected = 9 * has_value
    times = np.zeros(n, dtype=np.int64)
    if has_time.any():
        stamp, took = _varint(buf, time_at[has_time] + 1)
        expected[has_time] += 1 + took
        times[has_time] = stamp.view(np.int64)  # an int64 is its two's complement on the wire
    if (size != expected).any():
        raise _Unexpected
    values = np.zeros(n, dtype=np.float64)
    if has_value.any():
        payload = buf[at[has_value, None] + _VALUE_BYTES]  # fixed64, little-endian
        values[has_value] = np.ascontiguousarray(payload).view("<f8").reshape(-1)
    return times, values


def _plain(raw: bytes | memoryview, pb: ModuleType) -> Request:
    """The same ``Request`` through upb's objects, one series at a time."""
    from gpusteward.integrations.prometheus.remote_write.proto.types_pb2 import Sample

    try:
        req = pb.WriteRequestRaw.FromString(raw)
        keys, counts, times, values = [], [], [], []
        for ts in req.timeseries:
            keys.append(b"".join(bytes([_LABEL]) + _encode_varint(len(lb)) + lb for lb in ts.labels))
            counts.append(len(ts.samples))
            for s in map(Sample.FromString, ts.samples):
                times.append(s.timestamp)
                values.append(s.value)
    except Exception as e:
        raise Malformed(f"not a prometheus.WriteRequest: {e}") from e
    return Request(
        keys,
        np.array(counts, dtype=np.intp),
        np.array(times, dtype=np.int64),
        np.array(values, dtype=np.float64),
    )


def _encode_varint(x: int) -> bytes:
    out = bytearray()
    while True:
        b, x = x & 0x7F, x >> 7
        out.append(b | (0x80 if x else 0))
        if not x:
            return bytes(out)
