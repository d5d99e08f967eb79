"""The holdings a tick's rules are evaluated over: one element per GPU of each workload, grouped
by workload (``Holdings``), or one per GPU and holder for the repair rules (``per_gpu``), built
from arrays rather than per-GPU objects; and the per-rule map of workloads a rule could not
judge, built only when asked (``PerRule``)."""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar, overload

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.aggregates import FloatArray
from gpusteward.analysis.class_memo import MEMO
from gpusteward.domain.classes import CLASSES, workload_class
from gpusteward.domain.models import Gpu, Owner, Workload, WorkloadKind
from gpusteward.store.window import WindowView

BoolArray = npt.NDArray[np.bool_]
_T = TypeVar("_T")


class Picked(Sequence[_T]):
    """``base[i]`` for each ``i`` of ``index``, looked up when asked. The repair rules' holdings
    have one entry per GPU (100,000 a tick) and a tick reads those of the few that trip: two
    lists of them built every tick took 6 ms at 100,000 GPUs."""

    __slots__ = ("_base", "_index")

    def __init__(self, base: Sequence[_T], index: npt.NDArray[np.intp]) -> None:
        self._base, self._index = base, index

    def __len__(self) -> int:
        return len(self._index)

    @overload
    def __getitem__(self, i: int) -> _T: ...
    @overload
    def __getitem__(self, i: slice) -> list[_T]: ...
    def __getitem__(self, i: int | slice) -> _T | list[_T]:
        if isinstance(i, slice):
            return list(map(self._base.__getitem__, self._index[i].tolist()))
        return self._base[int(self._index[i])]

    def __iter__(self) -> Iterator[_T]:
        return map(self._base.__getitem__, self._index.tolist())


@dataclass(frozen=True)
class Layout:
    """Workloads' GPUs in one row, grouped by workload (read-only arrays)."""

    workloads: list[Workload]
    uuids: list[str]
    group: npt.NDArray[np.intp]  # per holding, its workload's position
    group_size: FloatArray  # per workload, how many GPUs it holds


class LayoutMemo:
    """The last ``Layout``, handed out again while the same workload objects come in the same
    order: ``Workload`` is frozen and the sources hand back unchanged ones as they were (see
    ``class_memo``), and chaining 31,000 workloads' uuids cost ~5 ms a tick at 100,000 GPUs."""

    def __init__(self) -> None:
        self._last: Layout | None = None
        #: Layouts built afresh over this memo's life (tests read it).
        self.built = 0

    def of(self, workloads: Sequence[Workload]) -> Layout:
        last = self._last  # one reference read: a concurrent tick sees a whole layout or another
        if (
            last is not None
            and len(last.workloads) == len(workloads)
            and all(map(operator.is_, last.workloads, workloads))
        ):
            return last
        # A workload's gpu_uuids are unique (sources guarantee it); a duplicate would only
        # be listed twice in a finding, never change what trips.
        per = [w.gpu_uuids for w in workloads]
        sizes = np.fromiter(map(len, per), dtype=np.intp, count=len(per))
        group = np.repeat(np.arange(len(per), dtype=np.intp), sizes)
        layout = Layout(
            list(workloads),
            list(itertools.chain.from_iterable(per)),
            group,
            sizes.astype(np.float64),
        )
        for a in (layout.group, layout.group_size):
            a.flags.writeable = False
        self._last = layout
        self.built += 1
        return layout


#: The memo every ``Holdings`` uses: one per process.
LAYOUTS = LayoutMemo()


class Holdings:
    """The (workload, GPU) pairs every rule is evaluated over, grouped by workload: group ``g``
    is held by ``workloads[g]`` (``per_gpu``: one group per GPU and holder)."""

    def __init__(
        self, view: WindowView, gpus: Mapping[str, Gpu], workloads: Sequence[Workload], now: datetime
    ) -> None:
        layout = LAYOUTS.of(workloads)
        self.workloads: Sequence[Workload] = layout.workloads
        self.uuids: Sequence[str] = layout.uuids
        self.group, self.group_size = layout.group, layout.group_size
        self.gpu_index = view.indices_of(self.uuids)
        self.gpus, self.now = gpus, now
        #: Whether a group holding all its workload's GPUs lists exactly ``gpu_uuids``.
        self.whole_workloads = True
        self._classes: npt.NDArray[np.intp] | None = None
        self._group_codes: Callable[[], npt.NDArray[np.intp]] = self._workload_codes

    def _workload_codes(self) -> npt.NDArray[np.intp]:
        return MEMO.codes(self.workloads)

    def per_gpu(self, view: WindowView) -> Holdings:
        """Every GPU of ``gpus`` once per holder (holders in workload order), a free one
        once with a holder of id ``""``. Built from these holdings' arrays: no per-GPU objects."""
        gpus = list(self.gpus)
        gidx = view.indices_of(gpus)
        if gidx.size and gidx.min() >= 0 and (self.gpu_index.size == 0 or self.gpu_index.min() >= 0):
            # Every GPU is in the store, whose rows are unique per uuid: key them by row.
            pos = np.full(view.n_gpus, -1, dtype=np.intp)
            pos[gidx] = np.arange(len(gpus), dtype=np.intp)
            at = pos[self.gpu_index]
        else:
            where = {u: i for i, u in enumerate(gpus)}
            at = np.fromiter(map(where.get, self.uuids, itertools.repeat(-1)), np.intp, len(self.uuids))
        held = at >= 0
        free = np.ones(len(gpus), dtype=np.bool_)
        free[at[held]] = False
        free_at = np.flatnonzero(free)
        gpu_at = np.concatenate((at[held], free_at))
        order = np.argsort(gpu_at, kind="stable")  # keeps each GPU's holders in workload order
        holder = np.concatenate((self.group[held], np.full(free_at.size, len(self.workloads), np.intp)))
        gpu_at, holder = gpu_at[order], holder[order]
        nobody = Workload("", WorkloadKind.PROCESS, "", Owner(""), 0, (), self.now)
        holders = [*self.workloads, nobody]
        out = object.__new__(Holdings)
        out.workloads = Picked(holders, holder)
        out.uuids = Picked(gpus, gpu_at)
        out.group = np.arange(len(out.uuids), dtype=np.intp)
        out.group_size = np.ones(len(out.uuids), dtype=np.float64)
        out.gpu_index = gidx[gpu_at]
        out.gpus, out.now, out.whole_workloads, out._classes = self.gpus, self.now, False, None

        def codes() -> npt.NDArray[np.intp]:
            return np.append(self._group_codes(), CLASSES.index(workload_class(nobody)))[holder]

        out._group_codes = codes
        return out

    def class_codes(self) -> npt.NDArray[np.intp]:
        """Per holding, the index in ``CLASSES`` of its workload's class (computed once)."""
        if self._classes is None:
            self._classes = self._group_codes()[self.group]
        return self._classes

    def in_classes(self, classes: Sequence[str]) -> BoolArray:
        """Per holding, whether its workload's class is one of ``classes``: a look-up table
        indexed by class code (an ``isin`` per rule cost ~1 ms at 100,000 GPUs)."""
        table = np.zeros(len(CLASSES), dtype=np.bool_)
        table[[CLASSES.index(c) for c in classes]] = True
        out: BoolArray = table[self.class_codes()]
        return out

    def _per_gpu(self, field: str) -> FloatArray:
        gpus = self.gpus
        return np.fromiter(
            (getattr(gpus[u], field) if u in gpus else math.nan for u in self.uuids),
            dtype=np.float64,
            count=len(self.uuids),
        )

    def _per_workload(self, values: list[float]) -> FloatArray:
        out: FloatArray = np.asarray(values, dtype=np.float64)[self.group]
        return out

    def attributes(self) -> dict[str, Callable[[], FloatArray]]:
        ws = self.workloads
        return {
            "memory_total_mib": lambda: self._per_gpu("memory_total_mib"),
            "price_per_hour": lambda: self._per_gpu("price_per_hour"),
            "gpus_requested": lambda: self._per_workload([float(w.gpus_requested) for w in ws]),
            "gpus_held": lambda: self.group_size[self.group],
            "age_minutes": lambda: self._per_workload(
                [(self.now - w.started_at).total_seconds() / 60.0 for w in ws]
            ),
        }

    def group_all(self, mask: BoolArray) -> BoolArray:
        """Per workload: whether ``mask`` holds for every GPU it holds."""
        # Work on the fewer side: a gate mask is almost all True, a trip mask almost all False.
        # Either way the sum over every holding (bincount with float weights) is avoided.
        hits = np.count_nonzero(mask)
        out: BoolArray
        if 2 * hits >= mask.size:
            out = np.ones(len(self.workloads), dtype=np.bool_)
            out[self.group[~mask]] = False  # a workload holding nothing stays True: all of none
        else:
            counts = np.bincount(self.group[mask], minlength=len(self.workloads))
            out = counts >= self.group_size
        return out

    def ids(self, groups: npt.NDArray[np.intp]) -> frozenset[str]:
        ws = self.workloads
        return frozenset(ws[g].id for g in groups.tolist())


class PerRule(Mapping[str, frozenset[str]]):
    """Rule name -> workload ids, built on first access: most ticks never ask."""

    def __init__(self, masks: dict[str, BoolArray], h: Holdings) -> None:
        self._masks, self._h, self._sets = masks, h, dict[str, frozenset[str]]()

    def __getitem__(self, rule: str) -> frozenset[str]:
        if rule not in self._sets:
            self._sets[rule] = self._h.ids(np.flatnonzero(self._masks[rule]))
        return self._sets[rule]

    def __iter__(self) -> Iterator[str]:
        return iter(self._masks)

    def __len__(self) -> int:
        return len(self._masks)
