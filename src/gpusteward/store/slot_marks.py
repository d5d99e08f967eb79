"""Per metric and threshold, each GPU's newest (``NewestMarks``) or oldest (``OldestMarks``) slot
with a value at or above it, kept by the window store from one tick to the next.

``WindowView.below_for_s`` needs, per GPU, the newest slot whose value is >= a threshold. A GPU
that never reaches it (an idle one, the very GPUs the idle rules are about) is scanned back to
the start of the window: at 10,000 GPUs and a 4-hour window of 1-minute slots that was two
thirds of a backtest tick's analysis. With the answer kept here, a tick scans only the slots
written since the last one: the new slots, and any older slot a late sample landed in. The
newest present slot (``last``, a GPU's age) is the same search at x = -inf (NaN is never >= it):
a GPU whose node stopped reporting was searched back through the window every tick.

The oldest present slot (``watched_s``, and ``below_for_s`` where nothing reaches x) is most
often the window's first: one row read. A GPU without a value there (a node whose exporter came
up late, a GPU that reports nothing) was searched block by block through the window every tick:
4.3 ms of a ~60 ms tick at 100,000 GPUs with 3 % of them so. Kept here, it stays the answer
while it is in the window and nothing at or before it was written since.

Exact, not an estimate: what was written since a mark is searched again, and a GPU whose marked
slot is no longer confirmed is searched in full.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpusteward.domain.models import Metric

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
#: (columns or None for all, (first slot, last slot), GPUs already answered or None) -> per GPU
#: the newest (oldest) slot >= x in that span, ``no_slot`` where none is (only ``columns``, or
#: those not answered, filled).
Search = Callable[["npt.NDArray[np.intp] | None", tuple[int, int], "BoolArray | None"], IntArray]
#: More distinct thresholds than this and all marks are forgotten (rules use a handful).
MAX_MARKS = 64
_CLEAN = 2**62


@dataclass(slots=True)
class _Mark:
    slots: IntArray  # per GPU index, as of ``first..through``
    first: int  # the range's first slot when marked
    through: int  # every slot up to this one is in ``slots``
    dirty_from: int  # the oldest slot written since, else _CLEAN
    shared: bool = True  # ``slots`` is also the answer a view was given: copied before a change


class _Marks:
    """The store tells it what it writes and clears; a view asks it instead of scanning."""

    def __init__(self, no_slot: int) -> None:
        self.no_slot = no_slot
        self._marks: dict[tuple[Metric, float], _Mark] = {}
        # A view may search on another thread while the loop writes (the web's rule preview):
        # a search is kept only if nothing was written or cleared while it ran.
        self._changes = 0
        self._lock = threading.Lock()

    def written(self, m: Metric, first_slot: int) -> None:
        """Values of ``m`` (NaN too) were written in slots from ``first_slot`` on."""
        with self._lock:
            self._changes += 1
            for (metric, _), mark in self._marks.items():
                if metric is m and first_slot < mark.dirty_from:
                    mark.dirty_from = first_slot

    def cleared(self, gpu: int) -> None:
        """GPU ``gpu``'s history was emptied (a new holder)."""
        with self._lock:
            self._changes += 1
            for mark in self._marks.values():
                if gpu < mark.slots.size:
                    if mark.shared:  # a view's answer is never changed after the fact
                        mark.slots, mark.shared = mark.slots.copy(), False
                    mark.slots[gpu] = self.no_slot

    @property
    def nbytes(self) -> int:
        """Memory the kept marks take."""
        return sum(mark.slots.nbytes for mark in self._marks.values())

    def _begin(self, key: tuple[Metric, float]) -> tuple[int, _Mark | None]:
        with self._lock:
            return self._changes, self._marks.get(key)

    def _slots(self, mark: _Mark, n_gpus: int) -> IntArray:
        """A copy of the mark's slots for ``n_gpus`` (those registered since: none)."""
        if mark.slots.size == n_gpus:
            return mark.slots.copy()
        out = np.full(n_gpus, self.no_slot, dtype=np.int64)
        kept = min(n_gpus, mark.slots.size)
        out[:kept] = mark.slots[:kept]
        return out

    def _keep(self, key: tuple[Metric, float], changes: int, out: IntArray, first: int, head: int) -> None:
        with self._lock:
            if changes == self._changes:  # else the mark it started from, told of the change, stays
                if len(self._marks) >= MAX_MARKS and key not in self._marks:
                    self._marks = {}
                self._marks[key] = _Mark(out, first, head, _CLEAN)  # shared with the answer


class NewestMarks(_Marks):
    """Per GPU, the newest slot of the window with a value >= x."""

    def find(self, m: Metric, x: float, lo: int, head: int, n_gpus: int, search: Search) -> IntArray:
        """Per GPU the newest slot in ``lo..head`` (the window, up to the newest slot) with a
        value >= ``x``, scanning only what changed since the last call for (m, x)."""
        changes, mark = self._begin((m, x))
        if mark is None:
            out = search(None, (lo, head), None)
        else:
            out = self._slots(mark, n_gpus)
            start = max(lo, min(mark.through + 1, mark.dirty_from))
            if start <= head:
                fresh = search(None, (start, head), None)
                hit = fresh != self.no_slot
                # Marked inside the span scanned again but not found there now: overwritten by
                # a late sample, so the newest hit, if any, is older; look for it in full.
                unsure = np.flatnonzero(~hit & (out >= start))
                np.copyto(out, fresh, where=hit)  # most GPUs hit: a mask, not their indices
                if unsure.size:
                    out[unsure] = search(unsure, (lo, head), None)[unsure]
            out[out < lo] = self.no_slot  # left the window
        self._keep((m, x), changes, out, lo, head)
        return out


class OldestMarks(_Marks):
    """Per GPU, the oldest slot of the window with a value >= x."""

    def find(self, m: Metric, x: float, lo: int, head: int, n_gpus: int, search: Search) -> IntArray:
        """Per GPU the oldest slot in ``lo..head`` (the window, up to the newest slot) with a
        value >= ``x``. A marked slot still in the window and older than every write since is
        the answer: the slots before it held nothing at or above x and were not written since.
        A GPU with none marked, or marked at or after a write, is searched from where the
        writes began; one whose slot left the window is searched in full."""
        changes, mark = self._begin((m, x))
        if mark is None or lo < mark.first or head < mark.through:
            out = search(None, (lo, head), None)
        else:
            out = self._slots(mark, n_gpus)
            start = max(lo, min(mark.through + 1, mark.dirty_from))
            none = out == self.no_slot
            gone = (out < lo) & ~none
            redo = np.flatnonzero(none | (out >= start))
            if redo.size:
                out[redo] = search(redo, (start, head), None)[redo] if start <= head else self.no_slot
            if gone.any():  # most often most GPUs: their slot was the window's first
                np.copyto(out, search(None, (lo, head), ~gone), where=gone)
        self._keep((m, x), changes, out, lo, head)
        return out
