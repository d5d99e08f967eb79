"""The arithmetic of a fold: points filed by series become one cell per (window slot, GPU), and
each cell a sample row and a holder. Both folds use it: the ``Assembler`` (a tick's series,
numbered afresh) and the remote-write ``Fold`` (series and GPUs numbered across ticks).

Per cell and field the newest valid point wins (a tie: the series filed last); the holder is
that of the newest point of any series in the cell (a tie: a series naming a holder, the last
filed, over one naming none).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from gpusteward.domain.models import Metric
from gpusteward.domain.sample_table import SampleTable
from gpusteward.integrations.prometheus.parse import (
    GR_ENGINE,
    MEM_FREE,
    MEM_RESERVED,
    MEM_TOTAL,
    SAMPLE_FIELDS,
    FloatArray,
    Holder,
    derive_health,
)

IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]
ObjectArray = npt.NDArray[np.object_]


@dataclass(frozen=True, slots=True)
class Slot:
    """What the series say about one window slot: a sample and a holder per GPU."""

    start_s: float
    #: One row per GPU with any reading, sorted by uuid.
    samples: SampleTable
    holders: Mapping[str, Holder | None]


class HeldMemo:
    """The last slot's holders, handed out again, the very mapping, while a slot has the same
    GPUs in the same order held by equal holders: the source (``PrometheusSource._apply``)
    then knows at once that nothing changed. Comparing two lists of the same objects is a C
    loop; building the mapping is a dictionary insert per GPU."""

    def __init__(self) -> None:
        self._last: tuple[list[str], list[Holder | None], Mapping[str, Holder | None]] | None = None

    def of(self, uuids: list[str], holders: list[Holder | None]) -> Mapping[str, Holder | None]:
        last = self._last
        if last is not None and last[0] == uuids and last[1] == holders:
            return last[2]
        held = MappingProxyType(dict(zip(uuids, holders, strict=True)))
        self._last = (uuids, holders, held)
        return held


@dataclass(frozen=True, slots=True)
class Filed:
    """Points to fold and what their series are. Per point: its series (points come series
    after series, in the order the series were filed), time and reading before scaling; per
    series: its GPU's number, its field (an index into the fold's fields; -1: it names only
    a holder), scale and whether it names a holder."""

    sid: IntArray
    t: FloatArray
    x: FloatArray
    series_gpu: IntArray
    series_field: IntArray
    series_scale: FloatArray
    series_names: BoolArray


@dataclass(frozen=True, slots=True)
class Numbering:
    """GPU numbers in uuid order: ``order[k]`` is the number of the k-th uuid, ``by_rank[k]``
    that uuid, and ``rank`` the inverse of ``order``."""

    order: IntArray
    rank: IntArray
    by_rank: ObjectArray

    @classmethod
    def of(cls, uuids: Sequence[str]) -> Numbering:
        order = np.argsort(np.array(uuids, dtype=object), kind="stable")
        rank = np.empty(len(uuids), dtype=np.intp)
        rank[order] = np.arange(len(uuids))
        return cls(order, rank, np.array(uuids, dtype=object)[order])


def fold(
    filed: Filed,
    fields: Sequence[str],
    gpus: Numbering,
    dropped: BoolArray,
    holder_of: Callable[[IntArray], list[Holder | None]],
    interval_s: float,
    memo: HeldMemo | None = None,
) -> tuple[list[Slot], tuple[IntArray, FloatArray]]:
    """Every slot seen, oldest first, and the memory totals read (GPU numbers, MiB: one per
    cell that has one). ``dropped``: per GPU number, a MIG parent whose cells are left out;
    ``holder_of`` answers the holders of series by number; ``memo``: the holders' mappings
    handed out before (kept across calls by a fold that lives across ticks)."""
    memo = HeldMemo() if memo is None else memo
    if not filed.sid.size:
        return [], (np.zeros(0, dtype=np.intp), np.zeros(0))
    g = len(gpus.rank)
    sid, t = filed.sid, filed.t
    slot = np.floor_divide(t + 1e-6, interval_s).astype(np.int64)
    # One cell per (slot, GPU), ordered by slot then uuid: the order samples come out in.
    keys, cell = _cells(slot * g + gpus.rank[filed.series_gpu[sid]])
    cell_rank = keys % g
    cell_gpu = gpus.order[cell_rank]
    cell_uuid: list[str] = gpus.by_rank[cell_rank].tolist()
    holders = holder_of(sid[_newest(cell, t, filed.series_names[sid], keys.size)])
    cols, at = _values(filed, fields, cell, keys.size)
    keep = ~dropped[cell_gpu]
    whole = _mem_totals(cols, keys.size)
    read = np.flatnonzero(keep & (whole > 0))
    util, gr = Metric.GPU_UTIL.value, cols.get(GR_ENGINE)
    if gr is not None:
        cols[util] = np.where(np.isnan(cols[util]), gr, cols[util]) if util in cols else gr
    derive_health(cols, keys.size)
    columns = {k: v for k, v in cols.items() if k in SAMPLE_FIELDS}
    # A cell is a sample where it has any Sample field (memory parts alone are not one).
    sampled = keep & ~np.all(np.isnan(list(columns.values())), axis=0) if columns else np.zeros_like(keep)
    out = []
    cell_slot = (keys // g).tolist()
    bounds = [0, *(np.flatnonzero(np.diff(cell_slot)) + 1).tolist(), keys.size]
    for lo, hi in itertools.pairwise(bounds):
        if sampled[lo:hi].all():  # every cell a sample: the uuids as they are
            rows, uuids = np.arange(lo, hi), cell_uuid[lo:hi]
        else:
            rows = lo + np.flatnonzero(sampled[lo:hi])
            uuids = list(map(cell_uuid.__getitem__, rows.tolist()))
        table = SampleTable(
            uuids,
            at[rows],
            {k: v[rows] for k, v in columns.items() if not np.isnan(v[rows]).all()},
        )
        if keep[lo:hi].all():  # no MIG parent among them: the slot's cells as they are
            held = memo.of(cell_uuid[lo:hi], holders[lo:hi])
        else:
            kept = (lo + np.flatnonzero(keep[lo:hi])).tolist()
            if not kept:  # only MIG parents, dropped
                continue
            held = MappingProxyType({cell_uuid[i]: holders[i] for i in kept})
        out.append(Slot(cell_slot[lo] * interval_s, table, held))
    return out, (cell_gpu[read], whole[read])


def _cells(key: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], IntArray]:
    """``np.unique(key, return_inverse=True)``: the keys present, sorted, and each one's index
    among them; by marking where the keys span little more than their count (a tick's slots)."""
    lo, hi = int(key.min()), int(key.max())
    if hi - lo > 4 * key.size:  # a backfill: many slots, a few points in each
        keys, cell = np.unique(key, return_inverse=True)
        return keys, cell.reshape(-1)
    present = np.zeros(hi - lo + 1, dtype=np.bool_)
    present[key - lo] = True
    return np.flatnonzero(present) + lo, (np.cumsum(present) - 1)[key - lo]


def _newest(cell: IntArray, t: FloatArray, names: BoolArray, n: int) -> IntArray:
    """Per cell, the point that names its holder: the newest; at a tie, one whose series names
    a holder over one that does not, then the series filed last (points come in the order their
    series were filed)."""
    return _last_newest(cell, t, names, n)


def _values(
    filed: Filed, fields: Sequence[str], cell: IntArray, n: int
) -> tuple[dict[str, FloatArray], FloatArray]:
    """Per field, each cell's newest valid value (NaN: none), and each cell's time: that of
    its newest valid value."""
    sid, t = filed.sid, filed.t
    field = filed.series_field[sid]
    v = filed.x * filed.series_scale[sid]
    valid = np.flatnonzero((field >= 0) & ~np.isnan(v))
    at = np.full(n, -np.inf)
    np.maximum.at(at, cell[valid], t[valid])
    read = np.flatnonzero(np.bincount(field[valid], minlength=len(fields)))
    cols = {}
    if valid.size:
        # The newest per (cell, field read); at a tie the point filed last.
        column = np.full(len(fields), -1, dtype=np.intp)
        column[read] = np.arange(read.size)
        group = cell[valid] * read.size + column[field[valid]]
        newest = _last_newest(group, t[valid], None, n * read.size).reshape(n, read.size)
        for j, k in enumerate(read.tolist()):
            point, has = newest[:, j], newest[:, j] >= 0
            cols[fields[k]] = np.full(n, np.nan)
            cols[fields[k]][has] = v[valid[point[has]]]
    return cols, at  # a field read has a valid point: each column has a value


def _last_newest(group: IntArray, t: FloatArray, first: BoolArray | None, n: int) -> IntArray:
    """Per group 0..n-1, the index of its newest point; at a tie, one where ``first`` holds,
    then the last (-1: a group with no point). Two maxima per group instead of a sort."""
    if group.size <= n and np.bincount(group, minlength=n).max(initial=0) <= 1 and not np.isnan(t).any():
        best = np.full(n, -1, dtype=np.intp)  # a point per group at most (a tick's scrapes): itself
        best[group] = np.arange(group.size)
        return best
    newest = np.full(n, -np.inf)
    np.maximum.at(newest, group, t)
    tied = np.flatnonzero(t == newest[group])
    rank = tied if first is None else tied + first[tied] * t.size  # larger wins
    best = np.full(n, -1, dtype=np.intp)
    np.maximum.at(best, group[tied], rank)
    return np.where(best >= t.size, best - t.size, best)


def _mem_totals(cols: Mapping[str, FloatArray], n: int) -> FloatArray:
    """Each cell's memory total: the total read, else used + free + reserved where free is
    read (NaN: neither)."""
    total, free = cols.get(MEM_TOTAL), cols.get(MEM_FREE)
    nan = np.full(n, np.nan)
    if total is None and free is None:
        return nan
    used, reserved = cols.get(Metric.MEM_USED.value, nan), cols.get(MEM_RESERVED, nan)
    parts = used + (nan if free is None else free) + np.where(np.isnan(reserved), 0.0, reserved)
    return parts if total is None else np.where(np.isnan(total), parts, total)
