"""Per block of slots, each GPU's count, sum, count below x, minimum and maximum, kept by the
window store from one tick to the next.

A rule's ``mean(gpu_util_pct, 30m)`` reads 180 slots of every GPU; the next tick reads 179 of the
same slots again. Slots are grouped in blocks of ``BLOCK_SLOTS`` by absolute slot number (block
``b`` holds slots ``b*B .. b*B+B-1``), and what a block reduces to is kept here once every slot
of it is written. A range is then the blocks it covers whole, read from here, plus the at most
two partial blocks at its ends, read from the rings: about 1/10 of the rows a tick read before.

Two more things are kept, so that a tick combines three arrays rather than a dozen: per range
length, the whole blocks of the range combined (a *run*: a live 30-minute range asks for the
same blocks tick after tick, one more when a block completes, and combines them afresh only when
its start leaves a block), and the newest, incomplete block as far as it is written (the *tail*,
extended by the slot each tick adds).

A view may be read on another thread while the loop ingests (the web's rule preview): what a view
reduced is kept only if nothing changed in the store since the view was made, checked under the
lock the store's reports take, so a reduction of values overwritten meanwhile is never kept.

Exact, not an estimate: the store tells this of every write (the blocks from the first slot
written on are forgotten), of every GPU whose history it empties (its column becomes an empty
block's) and of the window moving on (the blocks it left go). Counts are exact integers, sums are
float64 over float32 values, combined in one fixed order (the range's first partial block, its
run, its tail, each oldest first), so a range's answer depends only on the values and the range,
never on which blocks, runs or tails happened to be kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from gpusteward.domain.models import Metric

#: Slots per block: the rows a tick reads from the rings are at most two partial blocks.
BLOCK_SLOTS = 16
#: (kind, threshold): "present", "sum", "below" (with x), "fmin", "fmax".
Key = tuple[str, float]
Compute = Callable[[], npt.NDArray[np.generic]]
#: What a block of only missing values reduces to, per kind (a new or emptied GPU's column).
_EMPTY: dict[str, float] = {"present": 0, "sum": 0.0, "below": 0, "fmin": np.nan, "fmax": np.nan}
#: More distinct (kind, threshold) pairs in one block than this and that block's are forgotten
#: (rules ask for a handful); more runs than MAX_RUNS and all runs are.
MAX_KEYS = 32
MAX_RUNS = 256
#: What a run of blocks adds up in (a run may exceed the 255 slots of a block's uint8 count).
_RUN_DTYPE = {"present": np.int32, "below": np.int32, "sum": np.float64}
#: The extremes' reductions by kind; NaN is skipped, so a GPU without a value has NaN.
EXTREMES: dict[str, np.ufunc] = {"fmin": np.fmin, "fmax": np.fmax}


def _combine(
    kind: str, acc: npt.NDArray[np.generic] | None, part: npt.NDArray[np.generic]
) -> npt.NDArray[Any]:
    """``acc`` and the newer ``part`` combined as a run or a tail combines them: added (in the
    run's dtype, or the part's), or reduced with fmin or fmax; a new array."""
    if kind in ("fmin", "fmax"):
        out: npt.NDArray[Any] = part.copy() if acc is None else EXTREMES[kind](acc, part)
        return out
    if acc is None:
        return part.astype(_RUN_DTYPE[kind])
    total: npt.NDArray[Any] = np.add(acc, part, dtype=acc.dtype)
    return total


_K = TypeVar("_K")


@dataclass(slots=True)
class _Kept:
    first: int  # a run's first block, a tail's first slot
    last: int  # a run's last block, the newest slot a tail holds
    values: npt.NDArray[Any]


class BlockSums:
    """The store tells it what it writes, clears and moves past; a view asks it for whole blocks."""

    def __init__(self, block_slots: int = BLOCK_SLOTS) -> None:
        self.block_slots = block_slots
        # metric -> block -> (kind, x) -> per GPU, as long as the GPUs were when it was reduced
        self._blocks: dict[Metric, dict[int, dict[Key, npt.NDArray[np.generic]]]] = {}
        self._runs: dict[tuple[Metric, Key, int], _Kept] = {}  # by metric, key and range length
        self._tails: dict[tuple[Metric, Key], _Kept] = {}
        #: Moves on with every change the store reports: a view made before it keeps nothing.
        self.generation = 0
        self._lock = threading.Lock()  # the store's reports and what views keep

    def written(self, m: Metric, first_slot: int) -> None:
        """Values of ``m`` (NaN too) were written in slots from ``first_slot`` on."""
        first = first_slot // self.block_slots
        with self._lock:
            self.generation += 1
            blocks = self._blocks.get(m)
            if blocks:
                for b in [b for b in blocks if b >= first]:
                    del blocks[b]
            # A run holding a block from ``first`` on, a tail holding a slot from ``first_slot`` on.
            self._forget(
                lambda k, run: k[0] is m and run.last >= first,
                lambda k, t: k[0] is m and t.last >= first_slot,
            )

    def moved_past(self, oldest_slot: int) -> None:
        """The rings no longer hold the slots before ``oldest_slot``: their blocks go."""
        first = -(-oldest_slot // self.block_slots)  # the first block that starts in the rings
        with self._lock:
            self.generation += 1
            for blocks in self._blocks.values():
                for b in [b for b in blocks if b < first]:
                    del blocks[b]
            self._forget(lambda _, kept: kept.first < first, lambda _, kept: kept.first < oldest_slot)

    def _forget(self, run: Callable[[Any, _Kept], bool], tail: Callable[[Any, _Kept], bool]) -> None:
        for r in [k for k, v in self._runs.items() if run(k, v)]:
            del self._runs[r]
        for t in [k for k, v in self._tails.items() if tail(k, v)]:
            del self._tails[t]

    def cleared(self, gpus: list[int]) -> None:
        """These GPUs' histories were emptied (new holders): their columns are an empty block's."""
        picked = np.asarray(gpus, dtype=np.intp)
        with self._lock:
            self.generation += 1
            for blocks in self._blocks.values():
                for kept in blocks.values():
                    for (kind, _), arr in kept.items():
                        arr[picked[picked < arr.size]] = _EMPTY[kind]
            for (_, (kind, _), _), run in self._runs.items():
                run.values[picked[picked < run.values.size]] = _EMPTY[kind]
            for (_, (kind, _)), tail in self._tails.items():
                tail.values[picked[picked < tail.values.size]] = _EMPTY[kind]

    def block(
        self, m: Metric, b: int, key: Key, n_gpus: int, compute: Compute, generation: int
    ) -> npt.NDArray[np.generic]:
        """Block ``b``'s reduction ``key`` of ``m`` over ``n_gpus`` GPUs, reduced by ``compute`` on
        first use. GPUs registered since it was kept never held a value in it: empty. A view
        made before the store's last change (``generation``) may miss GPUs and values written
        since: what it reduces is used once, never kept."""
        with self._lock:
            kept = self._blocks.get(m, {}).get(b, {}) if generation == self.generation else {}
            arr = kept.get(key)
            if arr is not None:
                if arr.size < n_gpus:
                    arr = kept[key] = self._grown(arr, key[0], n_gpus)
                return arr[:n_gpus]
        arr = compute()
        with self._lock:
            if generation == self.generation:  # nothing written meanwhile: what was read is current
                kept = self._blocks.setdefault(m, {}).setdefault(b, {})
                if len(kept) >= MAX_KEYS:
                    kept.clear()
                kept[key] = arr
        return arr[:n_gpus]

    def run(
        self,
        m: Metric,
        key: Key,
        blocks: tuple[int, int],
        length: int,
        n_gpus: int,
        block: Callable[[int], npt.NDArray[np.generic]],
        generation: int,
    ) -> npt.NDArray[Any]:
        """Blocks ``first..last`` (``blocks``) combined oldest first, each from ``block``; kept per
        metric, key and ``length`` (of the range, in slots: one run per rule window). The same
        blocks asked for again are the kept run; newer blocks after them are combined onto it."""
        first, last = blocks
        at = (m, key, length)
        with self._lock:
            kept = self._runs.get(at) if generation == self.generation else None
        if kept is None or kept.first != first or kept.last > last:
            acc, start = None, first
        else:
            acc, start = self._grown(kept.values, key[0], n_gpus), kept.last + 1
        for b in range(start, last + 1):
            acc = _combine(key[0], acc, block(b))
        assert acc is not None  # first <= last
        self._keep(self._runs, at, _Kept(first, last, acc), generation)
        return acc[:n_gpus]

    def tail(
        self,
        m: Metric,
        key: Key,
        slots: tuple[int, int],
        n_gpus: int,
        piece: Callable[[int, int], npt.NDArray[np.generic]],
        generation: int,
    ) -> npt.NDArray[Any]:
        """Slots ``start..hi`` (``slots``: the newest block, not yet complete) reduced: kept per
        metric and key, and extended a slot at a time by ``piece(s, s)`` as slots are written."""
        start, hi = slots
        with self._lock:
            kept = self._tails.get((m, key)) if generation == self.generation else None
        if kept is None or kept.first != start or kept.last > hi:
            acc = piece(start, hi)
        else:
            acc = self._grown(kept.values, key[0], n_gpus)
            for s in range(kept.last + 1, hi + 1):
                acc = _combine(key[0], acc, piece(s, s))
        self._keep(self._tails, (m, key), _Kept(start, hi, acc), generation)
        return acc[:n_gpus]

    def _keep(self, where: dict[_K, _Kept], at: _K, kept: _Kept, generation: int) -> None:
        """Keep a run or tail, only if nothing was written since the view reading it was made."""
        with self._lock:
            if generation != self.generation:
                return
            if len(where) >= MAX_RUNS and at not in where:
                where.clear()
            where[at] = kept

    @staticmethod
    def _grown(values: npt.NDArray[Any], kind: str, n_gpus: int) -> npt.NDArray[Any]:
        """``values`` for ``n_gpus`` GPUs: those registered since never held a value in them."""
        if values.size >= n_gpus:
            return values
        grown = np.full(n_gpus, _EMPTY[kind], dtype=values.dtype)
        grown[: values.size] = values
        return grown

    @property
    def nbytes(self) -> int:
        """Memory the kept blocks, runs and tails take."""
        return sum(
            a.nbytes for blocks in self._blocks.values() for kept in blocks.values() for a in kept.values()
        ) + sum(v.values.nbytes for v in (*self._runs.values(), *self._tails.values()))
