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

import itertools
import math
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gpusteward.integrations.prometheus.query import RawSeries
from gpusteward.integrations.prometheus.remote_write.order import SKIP, UNKNOWN, SeriesOrder
from gpusteward.integrations.prometheus.remote_write.wire import decode
from gpusteward.integrations.prometheus.remote_write.wire import labels as decode_labels

if TYPE_CHECKING:
    from gpusteward.integrations.prometheus.remote_write.walk import Request

#: Series skipped by their encoded labels, at most (then the set starts again).
MAX_UNWANTED = 1_000_000
#: Prometheus refuses samples further ahead of its clock than this (``maxAheadTime``).
MAX_AHEAD_MS = 10 * 60 * 1000
#: The newest timestamp of a series with none yet.
_NEVER = -(2**63)

IntArray = npt.NDArray[np.int64] | npt.NDArray[np.intp]
FloatArray = npt.NDArray[np.float64]


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


@dataclass(frozen=True)
class Batch:
    """What arrived since the last drain, by series: series k is the receiver's series
    ``numbers[k]`` and its points are rows ``bounds[k]:bounds[k + 1]`` of ``t_s`` and
    ``values``, oldest first. Series come in the order their first point arrived.

    A series keeps its number from drain to drain until the receiver forgets the silent ones and
    numbers the others again; ``epoch`` then changes. ``labels_of[n]`` are series n's labels and
    ``key_of[n]`` the same labels as they came, encoded (the same bytes every time: cheaper to
    look up by): the receiver's own lists, which it only appends to until it numbers again, and
    then replaces."""

    numbers: npt.NDArray[np.intp]
    bounds: npt.NDArray[np.intp]
    t_s: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]
    epoch: int
    labels_of: Sequence[dict[str, str]]
    key_of: Sequence[bytes]

    @cached_property
    def labels(self) -> list[dict[str, str]]:
        """Each series' labels, in batch order."""
        return list(map(self.labels_of.__getitem__, self.numbers.tolist()))

    @cached_property
    def keys(self) -> list[bytes]:
        """Each series' encoded labels, in batch order."""
        return list(map(self.key_of.__getitem__, self.numbers.tolist()))

    def series(self) -> list[RawSeries]:
        t, v, b = self.t_s.tolist(), self.values.tolist(), self.bounds.tolist()
        spans = zip(self.labels, itertools.pairwise(b), strict=True)
        return [RawSeries(lb, list(zip(t[lo:hi], v[lo:hi], strict=True))) for lb, (lo, hi) in spans]


class Receiver:
    """Thread-safe: ``receive`` (any thread) appends, ``drain`` (the tick) takes what arrived.

    Only series named in ``names`` are kept (a Prometheus sends all it scrapes). At most
    ``max_samples`` wait between two drains; a request that would pass that is refused whole
    (``BufferFull``), so that the sender retries it rather than losing part of it.

    Each series known is a number: its labels, newest timestamp and value are kept by number
    (``_newest_ms``, ``_newest_v``), and what waits for the drain is arrays of (number, time,
    value), so a request's samples are judged together rather than one by one.
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
        self._ids: dict[bytes, int] = {}
        self._labels: list[dict[str, str]] = []
        self._keys: list[bytes] = []  # by number: the encoded labels it was given for
        self._newest_ms = np.empty(0, dtype=np.int64)
        self._newest_v = np.empty(0, dtype=np.float64)
        self._unwanted: set[bytes] = set()
        self._pending: list[tuple[IntArray, IntArray, FloatArray]] = []
        self._buffered = 0
        self._pruned_at = clock()
        self._epoch = 0  # how many times the series were numbered again
        self._order = SeriesOrder(0)  # the order series came in, for the decode's shortcut

    @property
    def buffered(self) -> int:
        """Samples waiting for the next drain."""
        return self._buffered

    def receive(self, body: bytes) -> Stats:
        """Decode a remote-write body and buffer its samples; the counts of this request.
        Raises ``BadBody``, ``TooLarge`` or ``BufferFull``."""
        # The series met before, for the decode's shortcut (walk.py): the numbers it finds stand
        # if the series are not numbered again before push takes the lock.
        epoch, known, order = self._epoch, self._ids, self._order
        req = decode(body, self.max_decoded_bytes, known, self._unwanted, order)
        return self.push(req, order.epoch if req.followed else epoch)

    def push(self, req: Request, epoch: int | None = None) -> Stats:
        """Buffer ``req``'s samples; ``epoch``: when its ``found`` numbers were looked up."""
        # Outside the lock (the tick never waits on a decode): which series are wanted. A series
        # is known by its encoded labels, so only a new one has them parsed.
        # The numbers found stand if the series are not numbered again before the lock is taken.
        unwanted, names = self._unwanted, self.names
        if req.found is not None and epoch is not None:
            found = req.found  # every series known, or one to skip
        else:
            epoch, known = self._epoch, self._ids
            lookups = map(known.get, req.labels, itertools.repeat(-1))
            found = np.fromiter(lookups, dtype=np.intp, count=len(req.labels))
        has_points = req.counts > 0
        wanted = (found >= 0) & has_points
        new: dict[bytes, dict[str, str]] = {}
        skipped: set[bytes] = set()
        # The shortcut's misses are all series it skips: nothing new among them to parse.
        shortcut, missed = found is req.found, np.flatnonzero(~wanted & has_points).tolist()
        unread, skips = ([], missed) if shortcut else (missed, [])
        for i in unread:
            key = req.labels[i]
            if key not in new:
                if key in unwanted or key in skipped:
                    skips.append(i)
                    continue
                labels = decode_labels(key)  # BadBody before anything is kept
                if labels.get("__name__") not in names:
                    skipped.add(key)
                    skips.append(i)
                    continue
                new[key] = labels
            wanted[i] = True
        take = np.repeat(wanted, req.counts)
        t_ms, values = req.t_ms[take], req.values[take]
        limit_ms = int(self.clock() * 1000) + MAX_AHEAD_MS
        with self._lock:
            self.stats.requests += 1
            if t_ms.size and self._buffered + t_ms.size > self.max_samples:
                self.stats.refused += 1
                raise BufferFull(self.retry_after_s)
            self._not_wanted(skipped)
            numbers = found[wanted] if self._epoch == epoch else np.full(int(wanted.sum()), -1, dtype=np.intp)
            at = np.flatnonzero(wanted)
            for i in np.flatnonzero(numbers < 0).tolist():
                numbers[i] = self._number(req.labels[at[i]], new)
            series = np.repeat(numbers, req.counts[wanted])
            kept, duplicates, out_of_order, too_new = self._judge(series, t_ms, values, limit_ms)
            if kept.any():
                self._pending.append((series[kept], t_ms[kept], values[kept]))
            if not req.followed:
                self._learn(req.labels, at, numbers, skips)
            accepted = int(kept.sum())
            self._buffered += accepted
            st = self.stats
            st.accepted += accepted
            st.duplicates += duplicates
            st.out_of_order += out_of_order
            st.too_new += too_new
            st.series = len(self._ids)
        return Stats(1, 0, accepted, duplicates, out_of_order, too_new)

    def _number(self, key: bytes, new: Mapping[bytes, dict[str, str]]) -> int:
        """The number of the series ``key``, numbering it if new (labels parsed already, or
        again: a prune may have forgotten it since the request was read)."""
        n = self._ids.get(key)
        if n is None:
            n = self._ids[key] = len(self._labels)
            self._labels.append(new.get(key) or decode_labels(key))
            self._keys.append(key)
            if n >= self._newest_ms.size:
                grow = max(1024, n)
                self._newest_ms = np.concatenate([self._newest_ms, np.full(grow, _NEVER, dtype=np.int64)])
                self._newest_v = np.concatenate([self._newest_v, np.full(grow, np.nan)])
        return n

    def _learn(self, keys: list[bytes], at: IntArray, numbers: IntArray, skips: Collection[int]) -> None:
        """Add a request looked up series by series to the order (``order.py``): the series at
        ``at`` have ``numbers`` and those at ``skips`` are skipped. Under the lock."""
        order = self._order
        if order.full(len(keys)):  # (a prune starts a new one: _prune)
            order = self._order = SeriesOrder(self._epoch)
        fate = np.full(len(keys), UNKNOWN, dtype=np.intp)
        fate[at] = numbers
        fate[np.asarray(skips, dtype=np.intp)] = SKIP
        own = self._keys  # the receiver's own bytes for its series: the order keeps no copy
        order.learn([own[n] if n >= 0 else k for k, n in zip(keys, fate.tolist(), strict=True)], fate)

    def _judge(
        self, series: IntArray, t: IntArray, v: FloatArray, limit_ms: int
    ) -> tuple[npt.NDArray[np.bool_], int, int, int]:
        """Which samples are kept, and how many were duplicates, out of order and too new, by
        the per-series rules in the module docstring. A series with one sample in the request
        (nearly all) is judged with the others at once; the rest one sample after another."""
        newest_ms, newest_v = self._newest_ms, self._newest_v
        ordered = np.sort(series)
        if (ordered[1:] != ordered[:-1]).all():  # each series once: the common case
            alone = np.ones(series.size, dtype=np.bool_)
            s, ta, va = series, t, v
        else:
            _, inverse, count = np.unique(series, return_inverse=True, return_counts=True)
            alone = count[inverse.reshape(-1)] == 1
            s, ta, va = series[alone], t[alone], v[alone]
        was_ms, was_v = newest_ms[s], newest_v[s]
        newer = ta > was_ms
        late = newer & (ta > limit_ms)
        take = newer & ~late
        same = (va == was_v) | (np.isnan(va) & np.isnan(was_v))
        duplicates = int((~newer & (ta == was_ms) & same).sum())
        kept = np.zeros(series.size, dtype=np.bool_)
        kept[np.flatnonzero(alone)[take]] = True
        newest_ms[s[take]], newest_v[s[take]] = ta[take], va[take]
        too_new = int(late.sum())
        for i in np.flatnonzero(~alone).tolist():
            n, ti, vi = int(series[i]), int(t[i]), float(v[i])
            if ti > newest_ms[n]:
                if ti > limit_ms:
                    too_new += 1
                    continue
                newest_ms[n], newest_v[n] = ti, vi
                kept[i] = True
            elif ti == newest_ms[n] and (vi == newest_v[n] or (math.isnan(vi) and math.isnan(newest_v[n]))):
                duplicates += 1
        return kept, duplicates, int(series.size - kept.sum()) - duplicates - too_new, too_new

    def _not_wanted(self, keys: Collection[bytes]) -> None:
        """Series gpusteward does not read (a Prometheus sends all it scrapes): skipped from now on
        without a look at their labels. Forgotten all at once past a bound."""
        if len(self._unwanted) + len(keys) > MAX_UNWANTED:
            self._unwanted = set()
        self._unwanted.update(keys)

    def drain_batch(self) -> Batch:
        """The samples received since the last drain, per series, oldest first."""
        with self._lock:
            pending, self._pending, self._buffered = self._pending, [], 0
            series = np.concatenate([p[0] for p in pending]) if pending else np.zeros(0, dtype=np.intp)
            numbers, first = np.unique(series, return_index=True)
            by_arrival = numbers[np.argsort(first, kind="stable")]
            labels_of, key_of, epoch = self._labels, self._keys, self._epoch
            now = self.clock()
            if now - self._pruned_at >= self.forget_after_s / 4:
                self._prune(now)
        if not pending:
            return Batch(by_arrival, np.zeros(1, dtype=np.intp), np.zeros(0), np.zeros(0), epoch, [], [])
        rank = np.empty(int(numbers.max()) + 1, dtype=np.intp)
        rank[by_arrival] = np.arange(by_arrival.size)
        order = np.argsort(rank[series], kind="stable")  # grouped by series, arrival order within
        t_ms = np.concatenate([p[1] for p in pending])[order]
        values = np.concatenate([p[2] for p in pending])[order]
        bounds = np.searchsorted(rank[series][order], np.arange(by_arrival.size + 1))
        return Batch(by_arrival, bounds.astype(np.intp), t_ms / 1000.0, values, epoch, labels_of, key_of)

    def drain(self) -> list[RawSeries]:
        """``drain_batch`` as one ``RawSeries`` per series."""
        return self.drain_batch().series()

    def _prune(self, now: float) -> None:
        """Forget the order of series silent for ``forget_after_s`` (gone GPUs, old pods); the
        others are numbered again (nothing is pending: the drain took it). With none silent the
        numbers stand, and so does ``epoch``: what readers keep by number stays good."""
        n = len(self._labels)
        keep = self._newest_ms[:n] >= (now - self.forget_after_s) * 1000
        self._pruned_at = now
        if keep.all():
            return
        renumber = np.cumsum(keep) - 1
        self._ids = {k: int(renumber[i]) for k, i in self._ids.items() if keep[i]}
        self._labels = [lb for lb, k in zip(self._labels, keep.tolist(), strict=True) if k]
        self._keys = [key for key, k in zip(self._keys, keep.tolist(), strict=True) if k]
        self._newest_ms = self._newest_ms[:n][keep]
        self._newest_v = self._newest_v[:n][keep]
        self._epoch += 1
        self._order = SeriesOrder(self._epoch)
        self.stats.series = len(self._ids)


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
