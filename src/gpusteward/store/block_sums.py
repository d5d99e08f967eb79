"""Per block of slots, each GPU's count, sum, count below x, minimum and maximum, kept by the
window store from one tick to the next.

A rule's ``mean(gpu_util_pct, 30m)`` reads 180 slots of every GPU; the next tick reads 179 of the
same slots again. Slots are grouped in blocks of ``BLOCK_SLOTS`` by absolute slot number (block
``b`` holds slots ``b*B .. b*B+B-1``), and what a block reduces to is kept here once every slot
of it is written. A range is then the blocks it covers whole, read from here, plus the at most
two partial blocks at its ends, read from the rings: about 1/10 of the rows a tick read before.

Exact, not an estimate: the store tells this of every write (the blocks from the first slot
written on are forgotten), of every GPU whose history it empties (its column becomes an empty
block's) and of the window moving on (the blocks it left go). Counts are exact integers, sums are
float64 over float32 values, so a range's answer depends only on the values and the range, never
on which blocks happened to be kept.
"""

from __future__ import annotations

from collections.abc import Callable

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
#: (rules ask for a handful).
MAX_KEYS = 32


class BlockSums:
    """The store tells it what it writes, clears and moves past; a view asks it for whole blocks."""

    def __init__(self, block_slots: int = BLOCK_SLOTS) -> None:
        self.block_slots = block_slots
        # metric -> block -> (kind, x) -> per GPU, as long as the GPUs were when it was reduced
        self._blocks: dict[Metric, dict[int, dict[Key, npt.NDArray[np.generic]]]] = {}
        #: Moves on with every change the store reports: a view made before it keeps nothing.
        self.generation = 0

    def written(self, m: Metric, first_slot: int) -> None:
        """Values of ``m`` (NaN too) were written in slots from ``first_slot`` on."""
        self.generation += 1
        blocks = self._blocks.get(m)
        if blocks:
            first = first_slot // self.block_slots
            for b in [b for b in blocks if b >= first]:
                del blocks[b]

    def moved_past(self, oldest_slot: int) -> None:
        """The rings no longer hold the slots before ``oldest_slot``: their blocks go."""
        self.generation += 1
        first = -(-oldest_slot // self.block_slots)  # the first block that starts in the rings
        for blocks in self._blocks.values():
            for b in [b for b in blocks if b < first]:
                del blocks[b]

    def cleared(self, gpus: list[int]) -> None:
        """These GPUs' histories were emptied (new holders): their columns are an empty block's."""
        self.generation += 1
        picked = np.asarray(gpus, dtype=np.intp)
        for blocks in self._blocks.values():
            for kept in blocks.values():
                for (kind, _), arr in kept.items():
                    arr[picked[picked < arr.size]] = _EMPTY[kind]

    def block(
        self, m: Metric, b: int, key: Key, n_gpus: int, compute: Compute, generation: int
    ) -> npt.NDArray[np.generic]:
        """Block ``b``'s reduction ``key`` of ``m`` over ``n_gpus`` GPUs, reduced by ``compute`` on
        first use. GPUs registered since it was kept never held a value in it: empty. A view
        made before the store's last change (``generation``) may miss GPUs and values written
        since: what it reduces is used once, never kept."""
        if generation != self.generation:
            return compute()
        kept = self._blocks.setdefault(m, {}).setdefault(b, {})
        arr = kept.get(key)
        if arr is None:
            if len(kept) >= MAX_KEYS:
                kept.clear()
            arr = kept[key] = compute()
        elif arr.size < n_gpus:
            grown = np.full(n_gpus, _EMPTY[key[0]], dtype=arr.dtype)
            grown[: arr.size] = arr
            arr = kept[key] = grown
        return arr[:n_gpus]

    @property
    def nbytes(self) -> int:
        """Memory the kept blocks take."""
        return sum(
            a.nbytes for blocks in self._blocks.values() for kept in blocks.values() for a in kept.values()
        )
