"""Per GPU, the newest (or oldest) slot of a ring with a value >= x: the scans behind
``WindowView``'s ``last``, ``below_for_s`` and ``watched_s``.

``out`` holds the answer (``NO_SLOT`` where none is found) and is filled in place; ``cols`` names
the GPUs to search (None: all of them).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
Cols = npt.NDArray[np.intp] | None
Ring = npt.NDArray[np.float32]


def scan(
    ring: Ring,
    spans: list[tuple[int, int, int]],
    x: float,
    newest: bool,
    cols: Cols,
    out: IntArray,
    settled: npt.NDArray[np.bool_] | None = None,
) -> IntArray:
    """Over ``spans`` (row blocks ``(row_start, row_stop, first_slot)``, from the end to search
    from). Stops once every GPU is settled; most are settled by the first row or two, so the
    first block goes row by row. While many GPUs are unsettled, a block is tested with one
    streaming ``fmax`` over all columns and searched only for the GPUs it settles; once few are
    left, only their columns are gathered. ``settled`` (with ``cols`` None): GPUs already answered."""
    n_gpus = ring.shape[1]
    b0, b1, slot0 = spans[0]
    singles = [(r, r + 1, slot0 + r - b0) for r in range(b0, b1)]
    todo = np.ones(n_gpus, dtype=np.bool_) if settled is None else ~settled
    left = (n_gpus if settled is None else int(np.count_nonzero(todo))) if cols is None else cols.size
    for b0, b1, slot0 in (singles[::-1] if newest else singles) + spans[1:]:
        if left == 0:
            break
        if cols is None and left * 16 < n_gpus:
            cols = np.flatnonzero(todo)
        if cols is None and b1 - b0 == 1:  # a row of all GPUs: most settle here, kept as a mask
            hit = (ring[b0] >= x) & todo
            np.copyto(out, slot0, where=hit)
            todo &= ~hit
            left -= int(np.count_nonzero(hit))
            continue
        if cols is None:
            gpus = np.flatnonzero((np.fmax.reduce(ring[b0:b1], axis=0) >= x) & todo)
            ok = ring[b0:b1, gpus] >= x
        else:
            block = ring[b0:b1, cols] >= x
            found = np.logical_or.reduce(block, axis=0)
            gpus, ok, cols = cols[found], block[:, found], cols[~found]
        if gpus.size == 0:
            continue
        if ok.shape[0] == 1:
            at: npt.NDArray[np.intp] | int = 0
        else:  # the row of the newest (oldest) hit in each column of the block
            at = ok.shape[0] - 1 - np.argmax(ok[::-1], axis=0) if newest else np.argmax(ok, axis=0)
        out[gpus] = slot0 + at
        left -= gpus.size
        todo[gpus] = False
    return out


def oldest_where_due(
    ring: Ring, rng: tuple[int, int], since: IntArray, cols: Cols, out: IntArray
) -> tuple[Cols, npt.NDArray[np.bool_] | None]:
    """The oldest present slot in ``rng`` of each GPU whose holder started inside it, looked for
    first at that start (``since``, the holder's first slot: the store keeps nothing older). One
    gather settles each of them that has a sample there, where ``scan`` went row by row from the
    range's start to it. The others' oldest slot is most often the range's first row, which
    ``scan`` reads whole. Returns what is left for ``scan``: the columns (``cols`` given), else
    the GPUs settled here."""
    idx = np.arange(ring.shape[1], dtype=np.intp) if cols is None else cols
    first = since[idx]
    done = first > rng[1]  # a holder with no slot in range has nothing to find
    late = np.flatnonzero((first > rng[0]) & ~done)
    hit = late[~np.isnan(ring[first[late] % ring.shape[0], idx[late]])]
    out[idx[hit]] = first[hit]
    done[hit] = True  # and those this gather answered
    return (None, done) if cols is None else (cols[~done], None)
