"""The window store: the last few minutes of every metric of every GPU, as numpy rings.

Each metric is one float32 array laid out time-major, ``(n_slots, capacity_gpus)``: a
row is one time slot for every GPU, so "the last d seconds" is at most two contiguous
row runs and a reduction over them streams through memory without copies. Missing
data is NaN, never 0: no data is not idleness. ``WindowView`` (window_view.py) reads it.

A slot is ``floor(t / interval_s)``; ``_slot_of_row`` records which absolute slot each
row holds, and moving the head forward clears the rows it skips so gaps stay gaps.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

import numpy as np
import numpy.typing as npt

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.models import Metric, Sample
from gpusteward.domain.sample_table import SampleTable
from gpusteward.store.block_sums import BlockSums
from gpusteward.store.slot_marks import NewestMarks, OldestMarks
from gpusteward.store.window_view import _EPS, NO_SLOT, IntArray, WindowView

__all__ = ["MAX_WINDOW_BYTES", "NO_SLOT", "WindowStore", "WindowView"]

#: The most memory the rings may take. A long window at a short tick on many GPUs is refused
#: with the settings to change, before numpy is asked for the memory (and the host swaps or dies).
MAX_WINDOW_BYTES = 8 * 2**30


_AT = operator.attrgetter("at")


def _clean(vals: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Every metric is non-negative: a negative reading is a sensor sentinel ("not
    available" in DCGM and NVML) and is stored as missing."""
    return np.where(vals < 0, np.float32(np.nan), vals) if (vals < 0).any() else vals


class WindowStore:
    """Rolling per-GPU metric history. One writer; views are read between writes."""

    def __init__(
        self,
        window_s: float,
        interval_s: float,
        metrics: Sequence[Metric] = tuple(Metric),
        capacity: int = 64,
    ) -> None:
        if window_s <= 0 or interval_s <= 0:
            raise ValueError("window_s and interval_s must be positive")
        self.window_s = float(window_s)
        self.interval_s = float(interval_s)
        self.n_slots = max(1, math.ceil(window_s / interval_s - _EPS))
        self.metrics: tuple[Metric, ...] = tuple(dict.fromkeys(metrics))
        self._cap = max(1, int(capacity))
        self._check_memory(self._cap)
        self._rings = {m: np.full((self.n_slots, self._cap), np.nan, dtype=np.float32) for m in self.metrics}
        # Metrics with a value ever stored; the others' rings are all NaN, so a view skips them.
        self._written: set[Metric] = set()
        self._fields = {m: operator.attrgetter(m.value) for m in self.metrics}
        self._slot_of_row: IntArray = np.full(self.n_slots, NO_SLOT, dtype=np.int64)
        self._head: int | None = None
        self._uuids: list[str] = []
        self._index: dict[str, int] = {}
        # Per GPU: the holder at the previous ingest (None: never told) and the first slot
        # of that holder's history; a late sample from before it belongs to someone else.
        self._holders: list[str | None] = []
        self._since: IntArray = np.full(self._cap, NO_SLOT, dtype=np.int64)
        # What views keep between ticks, told of every write, clear and move below.
        self.marks = NewestMarks(NO_SLOT)
        self.oldest = OldestMarks(NO_SLOT)
        self.sums = BlockSums()
        # The holders applied last: most ticks repeat them exactly.
        self._applied: dict[str, str] = {}
        # The last few all-known look-ups (the source's fleet at ingest, the held GPUs and the
        # fleet at analysis): most ticks repeat them exactly.
        self._looked_up: list[tuple[list[str], npt.NDArray[np.intp]]] = []

    def __len__(self) -> int:
        return len(self._uuids)

    def _check_memory(self, capacity: int, gpus: int | None = None) -> None:
        need = self.n_slots * capacity * len(self.metrics) * np.dtype(np.float32).itemsize
        if need > MAX_WINDOW_BYTES:
            raise ConfigError(
                f"the metric window for {gpus or capacity} GPUs would take {need / 2**30:.1f} GiB "
                f"({self.n_slots} slots of {self.interval_s:g} s x {len(self.metrics)} metrics); at most "
                f"{MAX_WINDOW_BYTES / 2**30:.0f} GiB: shorten store.window_minutes or lengthen tick_seconds"
            )

    @property
    def uuids(self) -> tuple[str, ...]:
        return tuple(self._uuids)

    @property
    def bytes_per_gpu_per_metric(self) -> int:
        return self.n_slots * np.dtype(np.float32).itemsize

    @property
    def kept_bytes_per_gpu_per_metric(self) -> float:
        """What views keep between ticks (block reductions, newest and oldest marks), per GPU and metric."""
        cells = max(1, len(self._uuids)) * len(self.metrics)
        return (self.sums.nbytes + self.marks.nbytes + self.oldest.nbytes) / cells

    @property
    def row_slots(self) -> IntArray:
        """The absolute slot each ring row holds (a copy)."""
        return self._slot_of_row.copy()

    @property
    def head_slot(self) -> int | None:
        """The newest slot written so far; None before the first ingest."""
        return self._head

    def index_of(self, uuid: str) -> int | None:
        return self._index.get(uuid)

    def holds_data(self, m: Metric) -> bool:
        """False when no value of ``m`` was ever stored: its ring is all NaN (never false
        otherwise: a ring cleared since still counts as holding data)."""
        return m in self._written

    def _mark(self, m: Metric, vals: npt.NDArray[np.float32]) -> None:
        if m not in self._written and not np.isnan(vals).all():
            self._written.add(m)

    def _written_from(self, m: Metric, first_slot: int) -> None:
        """Values of ``m`` are about to be written in slots from ``first_slot`` on."""
        self.marks.written(m, first_slot)
        self.oldest.written(m, first_slot)
        self.sums.written(m, first_slot)

    def _known(self, uuids: list[str], remember: bool) -> npt.NDArray[np.intp] | None:
        """Indices of ``uuids`` if every one is registered (read-only), else None. A uuid's index
        never changes, so a list equal to a recent one has its answer: the comparison runs at C
        speed, where 100,000 dict look-ups took 5 ms a tick. ``remember``: keep this answer."""
        for seen, idx in self._looked_up:
            if seen == uuids:
                return idx
        index = self._index
        try:  # one C-level lookup for the lot
            found = operator.itemgetter(*uuids)(index) if len(uuids) > 1 else [index[u] for u in uuids]
        except KeyError:
            return None
        idx = np.asarray(found, dtype=np.intp).reshape(len(uuids))
        idx.flags.writeable = False
        if remember:
            self._looked_up = [(uuids, idx), *self._looked_up[:3]]
        return idx

    def lookup(self, uuids: list[str]) -> npt.NDArray[np.intp]:
        """Indices of ``uuids``, -1 for a GPU never registered (read-only)."""
        uuids = list(uuids)
        idx = self._known(uuids, remember=True)
        if idx is None:
            index = self._index
            idx = np.fromiter((index.get(u, -1) for u in uuids), dtype=np.intp, count=len(uuids))
            idx.flags.writeable = False
        return idx

    def register(self, uuids: Iterable[str], *, remember: bool = True) -> npt.NDArray[np.intp]:
        """Indices of ``uuids``, adding the unknown ones at the end. ``remember``: this list
        is likely to come again (the whole fleet, in the source's order)."""
        uuids = list(uuids)
        known = self._known(uuids, remember)
        if known is not None:
            return known
        out: list[int] = []
        for u in uuids:
            i = self._index.get(u)
            if i is None:
                i = self._index[u] = len(self._uuids)
                self._uuids.append(u)
                self._holders.append(None)
            out.append(i)
        if len(self._uuids) > self._cap:
            cap = self._cap
            while cap < len(self._uuids):
                cap *= 2
            self._check_memory(cap, len(self._uuids))
            for m, old in self._rings.items():
                self._rings[m] = np.full((self.n_slots, cap), np.nan, dtype=np.float32)
                self._rings[m][:, : self._cap] = old
            self._since = np.concatenate([self._since, np.full(cap - self._cap, NO_SLOT, dtype=np.int64)])
            self._cap = cap
        return np.asarray(out, dtype=np.intp)

    def slot_of(self, at: datetime) -> int:
        return math.floor(at.timestamp() / self.interval_s + _EPS)

    def _advance(self, slot: int) -> None:
        """Make ``slot`` the newest, clearing every row between the old head and it."""
        if self._head is not None and slot <= self._head:
            return
        first = (
            slot - self.n_slots + 1 if self._head is None else max(self._head + 1, slot - self.n_slots + 1)
        )
        slots = np.arange(first, slot + 1)
        rows = slots % self.n_slots
        for ring in self._rings.values():
            ring[rows, :] = np.nan
        self._slot_of_row[rows] = slots
        self._head = slot
        self.sums.moved_past(slot - self.n_slots + 1)

    def _apply_holders(self, slot: int, holders: Mapping[str, str] | None) -> None:
        last = self._applied
        if not holders or holders == last:  # the same holders as last time: nothing to do
            return
        changed = {u: h for u, h in holders.items() if last.get(u) != h}  # only these can clear
        self._applied = dict(holders)
        cleared: list[int] = []
        for i, holder in zip(self.register(changed, remember=False).tolist(), changed.values(), strict=True):
            prev = self._holders[i]
            if prev is not None and prev != holder:
                cleared.append(i)
                self.marks.cleared(i)
                self.oldest.cleared(i)
            self._holders[i] = holder
        if cleared:
            # The window is the current holder's history only. One write per metric for all of
            # them; a ring never written is all NaN already (the health readings a source lacks).
            for m, ring in self._rings.items():
                if m in self._written:
                    ring[:, cleared] = np.nan
            self._since[cleared] = slot
            self.sums.cleared(cleared)

    def ingest(
        self, at: datetime, samples: Iterable[Sample], holders: Mapping[str, str] | None = None
    ) -> None:
        """Store ``samples``, each in the slot of its own ``at``, observed at ``at``.

        ``holders`` maps GPU uuid to the id of the workload holding it (``""``: none); a
        GPU whose holder changed since the previous ingest loses its history first.
        Samples older than the window, or than the current holder, are dropped.
        """
        table = samples if isinstance(samples, SampleTable) else None
        batch = [] if table is not None else list(samples)
        slot_at = self.slot_of(at)
        idx = self.register(table.uuids if table is not None else [s.gpu_uuid for s in batch])
        slots = self._slots(table) if table is not None else self._sample_slots(batch)
        self._advance(max(slot_at, int(slots.max())) if slots.size else slot_at)
        self._apply_holders(slot_at, holders)
        assert self._head is not None
        keep = (slots > self._head - self.n_slots) & (slots <= self._head) & (slots >= self._since[idx])
        if not keep.any():
            return
        kept = slots[keep]
        rows, cols, first = kept % self.n_slots, idx[keep], int(kept.min())
        for m, ring in self._rings.items():
            self._written_from(m, first)
            values = self._values(m, table, batch)
            if values is None:  # a metric the source lacks: no array to build
                ring[rows, cols] = np.nan
                continue
            column = _clean(values[keep])
            ring[rows, cols] = column
            self._mark(m, column)

    def _sample_slots(self, batch: list[Sample]) -> IntArray:
        # A source stamps its samples with a few shared times: each distinct one is converted once.
        ats = list(map(_AT, batch))
        slot_at_time = {t: self.slot_of(t) for t in dict.fromkeys(ats)}
        return np.fromiter(map(slot_at_time.__getitem__, ats), dtype=np.int64, count=len(batch))

    def _slots(self, table: SampleTable) -> IntArray:
        """The slot of each row, exactly as ``slot_of`` gives it for the row's ``Sample.at``."""
        times, inverse = table.times()
        return np.array([self.slot_of(t) for t in times], dtype=np.int64)[inverse]

    def _values(
        self, m: Metric, table: SampleTable | None, batch: list[Sample]
    ) -> npt.NDArray[np.float32] | None:
        """Every row's value of ``m`` as float32 (NaN: not measured), None where none has one."""
        if table is not None:
            col = table.column(m.value)
            return None if col is None else col.astype(np.float32, copy=False)
        vals = list(map(self._fields[m], batch))
        if vals.count(None) == len(vals):
            return None
        return np.array(vals, dtype=np.float32)  # None becomes NaN: the source could not measure it

    def ingest_arrays(
        self, at: datetime, values: Mapping[Metric, npt.ArrayLike], holders: Mapping[str, str] | None = None
    ) -> None:
        """Fast path: one value per registered GPU, in index order, for the slot of ``at``."""
        slot = self.slot_of(at)
        self._advance(slot)
        self._apply_holders(slot, holders)
        assert self._head is not None
        if slot <= self._head - self.n_slots:
            return
        n = len(self._uuids)
        blocked = self._since[:n] > slot
        for m, arr in values.items():
            vals = _clean(np.asarray(arr, dtype=np.float32))
            if vals.shape != (n,):
                raise ValueError(f"{m.value}: expected shape ({n},), got {vals.shape}")
            if m in self._rings:
                self._written_from(m, slot)
                self._rings[m][slot % self.n_slots, :n] = row = np.where(blocked, np.float32(np.nan), vals)
                self._mark(m, row)

    def view(self, now: datetime) -> WindowView:
        return WindowView(self, now)
