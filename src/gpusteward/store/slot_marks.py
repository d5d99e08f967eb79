"""Per metric and threshold, each GPU's newest slot with a value at or above it, kept by the
window store from one tick to the next.

``WindowView.below_for_s`` needs, per GPU, the newest slot whose value is >= a threshold. A GPU
that never reaches it (an idle one, the very GPUs the idle rules are about) is scanned back to
the start of the window: at 10,000 GPUs and a 4-hour window of 1-minute slots that was two
thirds of a backtest tick's analysis. With the answer kept here, a tick scans only the slots
written since the last one: the new slots, and any older slot a late sample landed in. The
newest present slot (``last``, a GPU's age) is the same search at x = -inf (NaN is never >= it):
a GPU whose node stopped reporting was searched back through the window every tick.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpusteward.domain.models import Metric

IntArray = npt.NDArray[np.int64]
#: (columns or None for all, (first slot, last slot)) -> per GPU the newest slot >= x in that
#: span, ``no_slot`` where none is (only ``columns`` filled when given).
Search = Callable[["npt.NDArray[np.intp] | None", tuple[int, int]], IntArray]
#: More distinct thresholds than this and all marks are forgotten (rules use a handful).
MAX_MARKS = 64
_CLEAN = 2**62


@dataclass(slots=True)
class _Mark:
    slots: IntArray  # per GPU index, as of ``through``
    through: int  # every slot up to this one is in ``slots``
    dirty_from: int  # the oldest slot written since, else _CLEAN


class NewestMarks:
    """The store tells it what it writes and clears; a view asks it instead of scanning.

    Exact, not an estimate: a slot written since the mark (a late sample can lower a value) is
    scanned again, and a GPU whose marked slot is no longer confirmed is searched in full.
    """

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
                    mark.slots[gpu] = self.no_slot

    @property
    def nbytes(self) -> int:
        """Memory the kept marks take."""
        return sum(mark.slots.nbytes for mark in self._marks.values())

    def newest(self, m: Metric, x: float, lo: int, head: int, n_gpus: int, search: Search) -> IntArray:
        """Per GPU the newest slot in ``lo..head`` (the window, up to the newest slot) with a
        value >= ``x``, scanning only what changed since the last call for (m, x)."""
        with self._lock:
            changes, mark = self._changes, self._marks.get((m, x))
        if mark is None:
            out = search(None, (lo, head))
        else:
            out = np.full(n_gpus, self.no_slot, dtype=np.int64)
            kept = min(n_gpus, mark.slots.size)
            out[:kept] = mark.slots[:kept]
            start = max(lo, min(mark.through + 1, mark.dirty_from))
            if start <= head:
                fresh = search(None, (start, head))
                hit = fresh != self.no_slot
                # Marked inside the span scanned again but not found there now: overwritten by
                # a late sample, so the newest hit, if any, is older; look for it in full.
                unsure = np.flatnonzero(~hit & (out >= start))
                np.copyto(out, fresh, where=hit)  # most GPUs hit: a mask, not their indices
                if unsure.size:
                    out[unsure] = search(unsure, (lo, head))[unsure]
            out[out < lo] = self.no_slot  # left the window
        with self._lock:
            if changes == self._changes:  # else the mark it started from, told of the change, stays
                if len(self._marks) >= MAX_MARKS and (m, x) not in self._marks:
                    self._marks = {}
                self._marks[(m, x)] = _Mark(out.copy(), head, _CLEAN)
        return out
