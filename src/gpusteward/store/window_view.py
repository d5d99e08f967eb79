"""Aggregates over a ``WindowStore`` at one ``now``: the vectorised reductions rules read.

Reductions run over the (at most two) contiguous row runs of the ring, block by block so
each block of rows stays in cache, and are memoised for the tick.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from gpusteward.domain.models import Metric
from gpusteward.store import slot_scan
from gpusteward.store.block_sums import EXTREMES
from gpusteward.store.rings import Rings

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_A = TypeVar("_A", bound=npt.NDArray[np.generic])
Rng = tuple[int, int]  # first and last absolute slot, inclusive
Cols = npt.NDArray[np.intp] | None


#: Sentinel for "no slot"; far below any real slot number.
NO_SLOT = -(2**62)
#: Rows per block: 12 rows of 100k GPUs stay in cache.
_BLOCK_ROWS = 12
#: Slack for slots computed from float seconds, so 1000.0 / 10 is never slot 99.
_EPS = 1e-9
#: Public aggregates that share memoised work (same family and metric) run on one thread.
_FAMILY = {"mean": "count", "coverage": "count", "fraction_below": "count", "min": "fmin", "max": "fmax"}
_FAMILY |= {"last": "scan", "below_for_s": "scan", "watched_s": "scan", "slope": "slope"}
#: Below this many GPUs the aggregates are computed on the calling thread.
_THREADS_FROM_GPUS = 20_000
_FAMILY_COST = {"count": 3, "scan": 2, "slope": 2, "fmin": 1, "fmax": 1}


class WindowView:
    """Aggregates of a store as seen at ``now``, memoised for one tick.

    It reads the live rings: make a new view after each ingest. Every aggregate is a
    float64 array over the GPUs in index order, NaN where a GPU has no data in range.
    "The last d seconds" are the slots starting after ``now - d`` and not after ``now``.
    """

    def __init__(self, store: Rings, now: datetime) -> None:
        self._store = store
        self.now = now
        self._now_s = now.timestamp()
        self.interval_s = store.interval_s
        self.window_s = store.window_s
        self.n_slots = store.n_slots
        self.uuids = store.uuids
        self.n_gpus = len(self.uuids)
        self._now_slot = store.slot_of(now)
        self._head = store.head_slot
        self._rings = {m: r[:, : self.n_gpus] for m, r in store._rings.items()}
        self._since = store._since[: self.n_gpus]
        # Never-stored metrics (health a source lacks): all NaN, so no range and no scans.
        self._blank = frozenset(m for m in self._rings if not store.holds_data(m))
        self._memo: dict[tuple[object, ...], npt.NDArray[np.generic]] = {}
        self._generation = store.sums.generation  # the store as this view was made

    def __len__(self) -> int:
        return self.n_gpus

    @property
    def metrics(self) -> tuple[Metric, ...]:
        return tuple(self._rings)

    def blank(self, m: Metric) -> bool:
        """Whether the store holds no data of ``m`` (never kept or never written): every
        aggregate of it is the same for every GPU."""
        return m not in self._rings or m in self._blank

    def index_of(self, uuid: str) -> int | None:
        i = self._store.index_of(uuid)
        return i if i is not None and i < self.n_gpus else None

    def indices_of(self, uuids: Iterable[str]) -> npt.NDArray[np.intp]:
        """View indices of ``uuids``; -1 for a GPU the store has not seen (read-only)."""
        idx = self._store.lookup(list(uuids))
        if idx.size and idx.max() < self.n_gpus:
            return idx  # read-only, shared with the store's memo
        idx = idx.copy()
        idx[idx >= self.n_gpus] = -1
        return idx

    # --- slot ranges and memoisation ----------------------------------------------------

    def slots_in(self, duration_s: float) -> int:
        """How many slots "the last ``duration_s`` seconds" span."""
        if duration_s <= 0:
            return 0
        lo = math.floor((self._now_s - duration_s) / self.interval_s + _EPS) + 1
        return max(0, self._now_slot - lo + 1)

    def _range(self, m: Metric, duration_s: float | None) -> Rng | None:
        """The slots of the last ``duration_s`` the ring holds (all up to now if None)."""
        if self._head is None or m not in self._rings or m in self._blank:
            return None
        lo = self._head - self.n_slots + 1
        if duration_s is not None:
            lo = max(lo, self._now_slot - self.slots_in(duration_s) + 1)
        hi = min(self._now_slot, self._head)
        return (lo, hi) if lo <= hi else None

    def _segments(self, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """(row_start, row_stop, first_slot) of the at most two row runs, oldest first."""
        r0, r1 = lo % self.n_slots, hi % self.n_slots
        if r0 <= r1:
            return [(r0, r1 + 1, lo)]
        return [(r0, self.n_slots, lo), (0, r1 + 1, lo + self.n_slots - r0)]

    def _spans(self, lo: int, hi: int, newest_first: bool) -> list[tuple[int, int, int]]:
        """Row blocks (row_start, row_stop, first_slot) over slots lo..hi, oldest or newest first."""
        spans = [
            (b, min(b + _BLOCK_ROWS, r1), slot0 + b - r0)
            for r0, r1, slot0 in self._segments(lo, hi)
            for b in range(r0, r1, _BLOCK_ROWS)
        ]
        return spans[::-1] if newest_first else spans

    def _memoised(self, key: tuple[object, ...], fn: Callable[[], _A]) -> _A:
        hit = self._memo.get(key)
        if hit is None:
            hit = fn()
            hit.flags.writeable = False  # shared by every rule this tick
            self._memo[key] = hit
        return hit  # type: ignore[return-value]

    def _empty(self, fill: float = np.nan) -> FloatArray:
        return np.full(self.n_gpus, fill, dtype=np.float64)

    def _slot_time(self, slots: IntArray) -> FloatArray:
        return slots.astype(np.float64) * self.interval_s

    # --- reductions (memoised by the clamped slot range, not by the duration) -------------

    def _piece(self, m: Metric, key: tuple[str, float], a: int, b: int) -> npt.NDArray[np.generic]:
        """Reduce the slots a..b (fewer than 256) of every GPU: present values (uint8), their
        sum (float64), how many are below x (uint8), their minimum or maximum (float32, NaN
        when none)."""
        kind, x = key
        rows = [self._rings[m][r0:r1] for r0, r1, _ in self._segments(a, b)]
        if kind == "present":
            nan = sum(np.add.reduce(np.isnan(r).view(np.uint8), axis=0, dtype=np.uint8) for r in rows)
            return (b - a + 1) - np.asarray(nan, dtype=np.uint8)
        if kind == "below":
            return np.asarray(sum(np.add.reduce(r < x, axis=0, dtype=np.uint8) for r in rows), np.uint8)
        if kind == "sum":
            total = np.zeros(self.n_gpus)
            zero, buf = np.zeros(self.n_gpus, dtype=np.float32), np.empty(self.n_gpus, dtype=np.float32)
            for run in rows:
                # Values are never negative and fmax ignores NaN: fmax(v, 0) is v, or 0 when missing.
                for row in run:
                    total += np.fmax(row, zero, out=buf)
            return total
        ufunc = EXTREMES[kind]
        return functools.reduce(ufunc, [ufunc.reduce(r, axis=0) for r in rows])

    def _reduce(self, m: Metric, key: tuple[str, float], rng: Rng) -> npt.NDArray[Any]:
        """``_piece`` over a whole range: its first partial block from the rings, then the blocks
        it covers whole (one run) and the newest partial block (the tail) as the store keeps them,
        combined oldest first (so the answer is the same whichever were kept)."""
        lo, hi = rng
        sums, n, gen = self._store.sums, self.n_gpus, self._generation
        size = sums.block_slots
        first, last = -(-lo // size), (hi + 1) // size - 1  # the blocks inside lo..hi

        def block(b: int) -> npt.NDArray[np.generic]:
            reduce = functools.partial(self._piece, m, key, b * size, (b + 1) * size - 1)
            return sums.block(m, b, key, n, reduce, gen)

        if first > last:
            parts = [self._piece(m, key, lo, hi)]
        else:
            parts = [self._piece(m, key, lo, first * size - 1)] if lo < first * size else []
            parts.append(sums.run(m, key, (first, last), hi - lo, n, block, gen))
            if (last + 1) * size <= hi:
                piece = functools.partial(self._piece, m, key)
                parts.append(sums.tail(m, key, ((last + 1) * size, hi), n, piece, gen))
        if key[0] in EXTREMES:
            return functools.reduce(EXTREMES[key[0]], parts).astype(np.float64)
        total: npt.NDArray[Any] = np.zeros(self.n_gpus, dtype=np.float64 if key[0] == "sum" else np.int64)
        for part in parts:
            total += part
        return total

    def _count(self, m: Metric, rng: Rng) -> IntArray:
        """Present values per GPU."""
        return self._memoised(("count", m, rng), lambda: self._reduce(m, ("present", 0.0), rng))

    def _sum(self, m: Metric, rng: Rng) -> FloatArray:
        return self._memoised(("sum", m, rng), lambda: self._reduce(m, ("sum", 0.0), rng))

    def _extreme(self, m: Metric, rng: Rng, kind: str) -> FloatArray:
        return self._memoised((kind, m, rng), lambda: self._reduce(m, (kind, 0.0), rng))

    def _find_slot(self, m: Metric, x: float, newest: bool) -> IntArray:
        """Per GPU, the newest (or oldest) slot in the window with a value >= x, else NO_SLOT."""
        rng, search = self._range(m, None), functools.partial(self._search, m, x, newest)
        if rng is not None and rng[1] == self._head:
            # Kept by the store between ticks: only what was written since is scanned.
            marks = self._store.marks if newest else self._store.oldest
            kept = functools.partial(marks.find, m, x, *rng, self.n_gpus, search)
            return self._memoised(("find", m, x, newest), kept)
        return self._memoised(("find", m, x, newest), lambda: search(None, None, None))

    def _search(
        self, m: Metric, x: float, newest: bool, cols: Cols, span: Rng | None, settled: BoolArray | None
    ) -> IntArray:
        """``_find_slot`` for every GPU (``cols`` None) or only for ``cols``, over the window (``span``
        None) or only the slots ``span`` of it; GPUs ``settled`` (with ``cols`` None) are skipped.

        ``x = -inf`` finds any present value (NaN >= -inf is False); ``store.slot_scan`` says how.
        """
        rng = self._range(m, None) if span is None else span
        if rng is None or self.n_gpus == 0:
            return np.full(self.n_gpus, NO_SLOT, dtype=np.int64)
        ring = self._rings[m]
        if newest and cols is None and rng[0] == rng[1]:  # one slot: what the newest marks ask a tick
            return np.where(ring[rng[0] % self.n_slots] >= x, np.int64(rng[0]), np.int64(NO_SLOT))
        out = np.full(self.n_gpus, NO_SLOT, dtype=np.int64)
        if not newest and x == -math.inf:
            cols, due = slot_scan.oldest_where_due(ring, rng, self._since, cols, out)
            if due is not None:
                settled = due if settled is None else due | settled
        return slot_scan.scan(ring, self._spans(*rng, newest), x, newest, cols, out, settled)

    def prefetch(self, calls: Iterable[tuple[str, Metric, tuple[float, ...]]], workers: int = 2) -> None:
        """Compute aggregates ahead: ``(method, metric, args)``, e.g. ``("mean", m, (1800,))``.

        numpy releases the GIL in its loops, so independent aggregates run on parallel
        threads. Calls that share memoised work (same metric and family) run in order on
        one thread, so no two threads ever compute or write the same memo entry.
        """
        groups: dict[tuple[str, Metric], list[Callable[[], object]]] = {}
        for method, m, args in calls:
            groups.setdefault((_FAMILY[method], m), []).append(
                functools.partial(getattr(self, method), m, *args)
            )

        def run(fns: list[Callable[[], object]]) -> None:
            for fn in fns:
                fn()

        # Heaviest first, so the last thread to finish is not one that started late.
        ordered = [fns for key, fns in sorted(groups.items(), key=lambda kv: -_FAMILY_COST[kv[0][0]])]
        # Starting threads costs more than it saves on small clusters.
        if workers < 2 or len(ordered) < 2 or self.n_gpus < _THREADS_FROM_GPUS:
            for fns in ordered:
                run(fns)
            return
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for done in [pool.submit(run, fns) for fns in ordered]:
                done.result()

    # --- public aggregates --------------------------------------------------------------

    def mean(self, m: Metric, duration_s: float) -> FloatArray:
        rng = self._range(m, duration_s)
        if rng is None:
            return self._empty()
        count = self._count(m, rng)
        with np.errstate(invalid="ignore", divide="ignore"):
            return self._memoised(
                ("mean", m, rng),
                lambda: np.where(count > 0, self._sum(m, rng) / np.maximum(count, 1), np.nan),
            )

    def min(self, m: Metric, duration_s: float) -> FloatArray:
        rng = self._range(m, duration_s)
        return self._empty() if rng is None else self._extreme(m, rng, "fmin")

    def max(self, m: Metric, duration_s: float) -> FloatArray:
        rng = self._range(m, duration_s)
        return self._empty() if rng is None else self._extreme(m, rng, "fmax")

    def coverage(self, m: Metric, duration_s: float) -> FloatArray:
        """Share of the slots in the last ``duration_s`` that hold data, 0..1. The whole
        duration counts, even beyond the window: 30 min of data never covers 60 min."""
        k = self.slots_in(duration_s)
        rng = self._range(m, duration_s)
        if k == 0 or rng is None:
            return self._empty(np.nan if k == 0 else 0.0)
        out: FloatArray = self._count(m, rng) / float(k)
        return out

    def fraction_below(self, m: Metric, x: float, duration_s: float) -> FloatArray:
        """Share of the present samples in the last ``duration_s`` that are below ``x``."""
        rng = self._range(m, duration_s)
        if rng is None:
            return self._empty()

        def run() -> FloatArray:
            below = self._reduce(m, ("below", x), rng)
            count = self._count(m, rng)
            with np.errstate(invalid="ignore", divide="ignore"):
                out: FloatArray = np.where(count > 0, below / np.maximum(count, 1), np.nan)
            return out

        return self._memoised(("fraction_below", m, x, rng), run)

    def last(self, m: Metric) -> FloatArray:
        """The most recent present value in the window."""

        def run() -> FloatArray:
            slots, rng = self._find_slot(m, -math.inf, newest=True), self._range(m, None)
            if rng is None:
                return self._empty()
            # Most GPUs' newest sample is in the range's newest slot: that row whole, then the
            # others' gathered (a gather of every GPU's slot cost ~1 ms at 100,000 GPUs).
            ring = self._rings[m]
            out: FloatArray = ring[rng[1] % self.n_slots].astype(np.float64)
            older = np.flatnonzero(slots != rng[1])
            if older.size:
                at = slots[older]
                out[older] = np.where(at != NO_SLOT, ring[at % self.n_slots, older], np.nan)
            return out

        return self._memoised(("last", m), run)

    def below_for_s(self, m: Metric, x: float) -> FloatArray:
        """How long the GPU has been continuously below ``x`` up to now, in seconds.

        Now minus the newest present sample >= x or, when none is, minus the start of the
        oldest present sample's interval (a sample speaks for the interval it measured,
        so 30 min of samples show 30 min below); 0 when the newest present sample is
        >= x; NaN without data. Missing slots do not break a run: coverage is separate.
        """

        def run() -> FloatArray:
            newest = self._find_slot(m, -math.inf, newest=True)
            ge = self._find_slot(m, x, newest=True)
            # Needed only where none is >= x, but found for every GPU at once and shared with
            # watched_s and every threshold: a gather of those columns alone cost more.
            oldest = self._find_slot(m, -math.inf, newest=False)
            since = np.where(ge != NO_SLOT, self._slot_time(ge), self._slot_time(oldest) - self.interval_s)
            out = np.maximum(self._now_s - since, 0.0)
            np.copyto(out, 0.0, where=ge == newest)  # a mask: most GPUs are busy
            np.copyto(out, np.nan, where=newest == NO_SLOT)
            return out

        return self._memoised(("below_for", m, x), run)

    def watched_s(self, m: Metric) -> FloatArray:
        """How long the GPU's current holder has been watched, up to the window: now minus the
        start of the oldest present sample's interval (as in ``below_for_s``); NaN without data."""

        def run() -> FloatArray:
            oldest = self._find_slot(m, -math.inf, newest=False)
            out = self._empty()
            have = np.flatnonzero(oldest != NO_SLOT)
            out[have] = np.maximum(self._now_s - self._slot_time(oldest[have]) + self.interval_s, 0.0)
            return out

        return self._memoised(("watched", m), run)

    def age_s(self) -> FloatArray:
        """Seconds since the newest present sample of any metric; inf when there is none."""

        def run() -> FloatArray:
            newest = functools.reduce(
                np.maximum,
                (self._find_slot(m, -math.inf, True) for m in self._rings),
                np.full(self.n_gpus, NO_SLOT),
            )
            return np.where(newest == NO_SLOT, np.inf, np.maximum(self._now_s - self._slot_time(newest), 0.0))

        return self._memoised(("age",), run)

    def slope(self, m: Metric, duration_s: float) -> FloatArray:
        """Least-squares slope per minute over the present samples; NaN with fewer than two."""
        rng = self._range(m, duration_s)
        if rng is None:
            return self._empty()
        sums = np.zeros((5, self.n_gpus))  # n, sum t, sum t^2, sum y, sum t*y
        for b0, b1, slot0 in self._spans(*rng, newest_first=False):
            blk = self._rings[m][b0:b1]
            t = (np.arange(b1 - b0) + (slot0 - rng[0])) * (self.interval_s / 60.0)  # minutes from the start
            present = ~np.isnan(blk)
            p, y = present.astype(np.float64), np.where(present, blk, 0.0)
            sums += [p.sum(axis=0), t @ p, (t * t) @ p, y.sum(axis=0), t @ y]
        n, st, stt, sy, sty = sums
        with np.errstate(invalid="ignore", divide="ignore"):
            den = n * stt - st * st
            out: FloatArray = np.where((n >= 2) & (den > 0), (n * sty - st * sy) / den, np.nan)
        return out
