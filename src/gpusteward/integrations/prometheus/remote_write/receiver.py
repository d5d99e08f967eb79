"""The buffer between the web server's threads, which receive remote writes, and the loop's
tick, which drains them.

Order, as Prometheus' own receiver sees it (storage/remote/write_handler.go, v1 requests):
each sample is appended to the TSDB head; a sample at the newest timestamp of its series with
the same value is accepted and ignored; an older one (``ErrOutOfOrderSample``), one at that
timestamp with another value (``ErrDuplicateSampleForTimestamp``) or one over 10 minutes ahead
of the clock (``ErrOutOfBounds``) fails the whole request with 400 and nothing of it is kept.

gpusteward keeps the same per-series rules but drops only the offending samples, counted in
``Stats``, and keeps the rest of the request (answered 204). One stale series (an HA pair of
Prometheus servers sending the same series twice, a sender replaying its WAL) would otherwise
cost every other series of its batches, and each 400 is an error in the sender's log.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpusteward.integrations.prometheus.query import RawSeries
from gpusteward.integrations.prometheus.remote_write.wire import decode
from gpusteward.integrations.prometheus.remote_write.wire import labels as decode_labels

if TYPE_CHECKING:
    from gpusteward.integrations.prometheus.remote_write.proto.remote_pb2 import WriteRequestRaw

#: Series skipped by their encoded labels, at most (then the set starts again).
MAX_UNWANTED = 1_000_000
#: Prometheus refuses samples further ahead of its clock than this (``maxAheadTime``).
MAX_AHEAD_MS = 10 * 60 * 1000


class BufferFull(Exception):
    """The buffer cannot take the request (answered 429 with ``Retry-After``)."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"buffer full: retry in {retry_after_s} s")
        self.retry_after_s = retry_after_s


@dataclass
class Stats:
    """Counts since start: requests, and samples by what became of them."""

    requests: int = 0
    refused: int = 0  # requests answered 429
    accepted: int = 0
    duplicates: int = 0  # same timestamp and value as the newest: ignored
    out_of_order: int = 0  # older than the newest, or its timestamp with another value
    too_new: int = 0  # more than 10 minutes ahead
    series: int = 0  # series known now


@dataclass(slots=True)
class _Series:
    labels: dict[str, str]
    newest_ms: int = -(2**63)
    newest_v: float = math.nan
    points: list[tuple[float, float]] = field(default_factory=list)


class Receiver:
    """Thread-safe: ``receive`` (any thread) appends, ``drain`` (the tick) takes what arrived.

    Only series named in ``names`` are kept (a Prometheus sends all it scrapes). At most
    ``max_samples`` wait between two drains; a request that would pass that is refused whole
    (``BufferFull``), so that the sender retries it rather than losing part of it.
    """

    def __init__(
        self,
        names: Collection[str],
        *,
        max_samples: int = 5_000_000,
        max_body_bytes: int = 32 * 1024 * 1024,
        max_decoded_bytes: int = 256 * 1024 * 1024,
        retry_after_s: int = 5,
        forget_after_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.names = frozenset(names)
        self.max_samples = max_samples
        #: The web handler's limit on what it reads (the receiver only sees bodies under it).
        self.max_body_bytes = max_body_bytes
        self.max_decoded_bytes = max_decoded_bytes
        self.retry_after_s = retry_after_s
        self.forget_after_s = forget_after_s
        self.clock = clock
        self.stats = Stats()
        self._lock = threading.Lock()
        self._series: dict[tuple[bytes, ...], _Series] = {}
        self._unwanted: set[tuple[bytes, ...]] = set()
        self._pending: list[_Series] = []
        self._buffered = 0
        self._pruned_at = clock()

    @property
    def buffered(self) -> int:
        """Samples waiting for the next drain."""
        return self._buffered

    def receive(self, body: bytes) -> Stats:
        """Decode a remote-write body and buffer its samples; the counts of this request.
        Raises ``BadBody``, ``TooLarge`` or ``BufferFull``."""
        return self.push(decode(body, self.max_decoded_bytes))

    def push(self, req: WriteRequestRaw) -> Stats:
        # Samples leave protobuf outside the lock (the tick never waits on a decode); a series
        # is known by its encoded labels, so only a new one has them parsed. A known series is
        # looked up once, here: at 20,000 GPUs that is 60,000 look-ups a tick.
        wanted: list[tuple[tuple[bytes, ...], _Series | dict[str, str], list[tuple[int, float]]]] = []
        new: list[tuple[bytes, ...]] = []
        total = 0
        unwanted, known, names = self._unwanted, self._series, self.names
        for ts in req.timeseries:
            samples = ts.samples
            if not samples:
                continue
            key = tuple(ts.labels)
            series: _Series | dict[str, str] | None = known.get(key)
            if series is None:
                if key in unwanted:
                    continue
                series = decode_labels(key)  # BadBody before anything is kept
                if series.get("__name__") not in names:
                    new.append(key)
                    continue
            points = [(p.timestamp, p.value) for p in samples]
            wanted.append((key, series, points))
            total += len(points)
        accepted = duplicates = out_of_order = too_new = 0
        limit_ms = int(self.clock() * 1000) + MAX_AHEAD_MS
        with self._lock:
            self.stats.requests += 1
            if total and self._buffered + total > self.max_samples:
                self.stats.refused += 1
                raise BufferFull(self.retry_after_s)
            self._not_wanted(new)
            if self._series is not known:  # pruned since: look up again (parsed labels kept)
                wanted = [(k, self._series.get(k) or _labels_of(sr), p) for k, sr, p in wanted]
            pending = self._pending
            for key, found, points in wanted:
                if isinstance(found, _Series):
                    s = found
                else:  # new: made once, should the request hold it twice
                    s = self._series.get(key) or self._series.setdefault(key, _Series(found))
                was_pending = bool(s.points)
                for t, v in points:
                    if t > s.newest_ms:
                        if t > limit_ms:
                            too_new += 1
                            continue
                        s.newest_ms, s.newest_v = t, v
                        s.points.append((t / 1000.0, v))
                        accepted += 1
                    elif t == s.newest_ms and (v == s.newest_v or (math.isnan(v) and math.isnan(s.newest_v))):
                        duplicates += 1
                    else:
                        out_of_order += 1
                if s.points and not was_pending:
                    pending.append(s)
            self._buffered += accepted
            st = self.stats
            st.accepted += accepted
            st.duplicates += duplicates
            st.out_of_order += out_of_order
            st.too_new += too_new
            st.series = len(self._series)
        return Stats(1, 0, accepted, duplicates, out_of_order, too_new)

    def _not_wanted(self, keys: list[tuple[bytes, ...]]) -> None:
        """Series gpusteward does not read (a Prometheus sends all it scrapes): skipped from now on
        without a look at their labels. Forgotten all at once past a bound."""
        if len(self._unwanted) + len(keys) > MAX_UNWANTED:
            self._unwanted = set()
        self._unwanted.update(keys)

    def drain(self) -> list[RawSeries]:
        """The samples received since the last drain, per series, oldest first."""
        with self._lock:
            pending, self._pending, self._buffered = self._pending, [], 0
            out = [RawSeries(s.labels, s.points) for s in pending]
            for s in pending:
                s.points = []
            now = self.clock()
            if now - self._pruned_at >= self.forget_after_s / 4:
                self._prune(now)
        return out

    def _prune(self, now: float) -> None:
        """Forget the order of series silent for ``forget_after_s`` (gone GPUs, old pods)."""
        cutoff = (now - self.forget_after_s) * 1000
        self._series = {k: s for k, s in self._series.items() if s.newest_ms >= cutoff or s.points}
        self._pruned_at = now
        self.stats.series = len(self._series)


def _labels_of(found: _Series | dict[str, str]) -> dict[str, str]:
    return found.labels if isinstance(found, _Series) else found


_active: Receiver | None = None
_active_lock = threading.Lock()


def activate(receiver: Receiver) -> None:
    """Make ``receiver`` the one this process's web server writes into: the source's first tick
    calls it, so a steward that never ticks (the web's own probe under ``serve``) takes nothing."""
    global _active
    with _active_lock:
        _active = receiver


def active() -> Receiver | None:
    return _active
