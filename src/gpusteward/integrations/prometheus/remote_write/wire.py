"""The remote-write 1.0 wire format: a snappy *block* (not framed) holding a protobuf
``prometheus.WriteRequest``. Decoded with cramjam's snappy and the upb protobuf runtime, both
imported on first use so that a plain install runs without the ``remote-write`` extra.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from gpusteward.domain.errors import SourceUnavailable
from gpusteward.integrations.prometheus.remote_write.walk import Malformed, Request, columns

if TYPE_CHECKING:
    from gpusteward.integrations.prometheus.remote_write.order import SeriesOrder
    from gpusteward.integrations.prometheus.remote_write.proto.types_pb2 import Label

EXTRA = "pip install 'gpusteward[remote-write]'"


class BadBody(ValueError):
    """Not a snappy-compressed WriteRequest (answered 400: the sender must not retry it)."""


class TooLarge(ValueError):
    """The body, or what it says it decompresses to, is over the limit (answered 413)."""


def _libs() -> tuple[ModuleType, ModuleType]:
    try:
        import cramjam

        from gpusteward.integrations.prometheus.remote_write.proto import remote_pb2
    except ImportError as e:  # the extra is missing, or protobuf is older than the generated code
        raise SourceUnavailable(f"remote write needs protobuf and cramjam ({EXTRA}): {e}") from e
    return cramjam.snappy, remote_pb2


def available() -> str:
    """ "" when the libraries load, else why not."""
    try:
        _libs()
    except SourceUnavailable as e:
        return str(e)
    return ""


def decode(
    body: bytes,
    max_decoded_bytes: int,
    known: Mapping[bytes, int] | None = None,
    skip: Collection[bytes] = frozenset(),
    order: SeriesOrder | None = None,
) -> Request:
    """The request in ``body``, as columns (``walk.Request``: each series' labels left encoded;
    ``known``, ``skip`` and ``order``, series met before, as ``walk.columns`` takes them). The length
    snappy declares is checked before decompressing: a small body can claim (and expand to)
    many times its size."""
    snappy, pb = _libs()
    try:
        size = snappy.decompress_raw_len(body)
    except Exception as e:  # cramjam raises its own DecompressionError, or ValueError on junk
        raise BadBody(f"not a snappy block: {e}") from e
    if size > max_decoded_bytes:
        raise TooLarge(f"body decompresses to {size} bytes, over the {max_decoded_bytes}-byte limit")
    try:
        raw = memoryview(snappy.decompress_raw(body))  # upb reads it in place: no copy
    except Exception as e:
        raise BadBody(f"not a snappy block: {e}") from e
    try:
        return columns(raw, pb, known, skip, order)
    except Malformed as e:
        raise BadBody(str(e)) from e


def labels(encoded: bytes) -> dict[str, str]:
    """A series' labels from their encoded ``Label`` fields (``Request.labels``)."""
    _, pb = _libs()
    from gpusteward.integrations.prometheus.remote_write.proto.types_pb2 import Label as LabelMessage

    out = {}
    try:
        for raw in pb.TimeSeriesRaw.FromString(encoded).labels:
            lb: Label = LabelMessage.FromString(raw)
            out[lb.name] = lb.value
    except Exception as e:
        raise BadBody(f"not a prometheus.Label: {e}") from e
    return out


#: One series to send: its labels (``__name__`` among them) and (epoch ms, value) samples.
Series = tuple[Mapping[str, str], Sequence[tuple[int, float]]]


def encode(series: Iterable[Series]) -> bytes:
    """A remote-write body, as the senders build it (labels sorted by name); for tests and the
    benchmark."""
    snappy, pb = _libs()
    req = pb.WriteRequest()
    for labels, samples in series:
        ts = req.timeseries.add()
        for k in sorted(labels):
            ts.labels.add(name=k, value=labels[k])
        for t, v in samples:
            ts.samples.add(timestamp=t, value=v)
    return bytes(snappy.compress_raw(req.SerializeToString()))
