"""Folding exporter series into gpusteward's view: ``Assembler`` turns many series into one
sample per GPU per window slot (newest value of each field in the slot, at the time of the
newest of them) and the holder of each GPU in that slot; ``workloads.build_workloads`` turns the
holders into workloads. Pure, like ``parse``.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gpusteward.domain.models import Gpu
from gpusteward.integrations.prometheus.cells import Filed, Numbering, Slot, fold
from gpusteward.integrations.prometheus.filing import FOLDS, NOT_OURS, Filing, Identities
from gpusteward.integrations.prometheus.parse import (
    FP64_BLANK,
    HOLDER,
    INT32_BLANK,
    FloatArray,
    GpuIdentity,
    Holder,
    LabelMap,
    MetricSpec,
)
from gpusteward.integrations.prometheus.query import RawSeries

if TYPE_CHECKING:
    from gpusteward.integrations.prometheus.remote_write.receiver import Batch

BoolArray = npt.NDArray[np.bool_]
_KIND, _IDENT, _FIELD = attrgetter("kind"), attrgetter("ident"), attrgetter("field")
_SCALE, _HOLDER, _UUID = attrgetter("scale"), attrgetter("holder"), attrgetter("ident.uuid")
_COMPLETE = attrgetter("complete")
#: What a GPU whose labels name no node or model is called.
_NO_NODE, _NO_MODEL = "?", "unknown"


class GpuView:
    """A fold of series by ``specs`` and ``labels`` into slots of ``interval_s``; what it hands
    the source's book: the GPUs it saw (``gpus``: identities by uuid) and their memory totals."""

    def __init__(
        self,
        specs: Mapping[str, MetricSpec],
        labels: LabelMap,
        interval_s: float,
        ignore_pods: re.Pattern[str] | None = None,
        identities: Identities | None = None,
    ) -> None:
        self.specs = specs
        self.lm = labels
        self.interval_s = float(interval_s)
        self.ignore_pods = ignore_pods
        self.gpus: dict[str, GpuIdentity] = {}
        self.mem_total: dict[str, float] = {}
        # A label set seen before (this tick or an earlier one) is identified once.
        self._seen = identities if identities is not None else Identities()
        self._begin()

    def _begin(self) -> None:
        """The fold's own state, empty."""

    def gpu(self, uuid: str) -> Gpu:
        g = self.gpus[uuid]
        return Gpu(
            uuid=uuid,
            node=g.node or _NO_NODE,
            index=g.index,
            model=g.model or _NO_MODEL,
            memory_total_mib=self.mem_total.get(uuid, 0.0),
        )

    def kept(self, uuid: str, old: Gpu) -> bool:
        """Whether ``old`` stands for ``gpu(uuid)``: the same fields, at least its memory total
        (checked without building the Gpu: nearly every GPU is as it was)."""
        g = self.gpus[uuid]
        return (
            old.node == (g.node or _NO_NODE)
            and old.index == g.index
            and old.model == (g.model or _NO_MODEL)
            and old.memory_total_mib >= self.mem_total.get(uuid, 0.0)
        )


class Assembler(GpuView):
    """Folds series into GPUs and one sample per GPU per slot of ``interval_s``.

    A MIG parent whose instances are seen is dropped: the instances are the GPUs.
    Utilisation falls back to the graphics-engine ratio where GPU_UTIL is absent.

    ``add`` only files each series' points; ``slots`` folds them all at once as arrays. Per
    GPU, slot and field the newest valid point wins (a tie: the series added last); the
    holder is that of the newest point of any series in the slot (a tie: a series naming a
    holder, the last added, over one naming none).
    """

    def _begin(self) -> None:
        self.series = 0
        # Per series filed: its GPU (as a number), field, scale and holder.
        self._gpu_number: dict[str, int] = {}
        self._series_gpu: list[int] = []
        self._series_field: list[str] = []
        self._series_scale: list[float] = []
        self._series_holder: list[Holder | None] = []
        # Per point filed by ``add``: its series, time and raw value (text from the HTTP API);
        # sealed as arrays into ``_filed`` (series, time, reading) before a batch and at the end.
        self._filed: list[tuple[npt.NDArray[np.intp], FloatArray, FloatArray]] = []
        self._point_series: list[int] = []
        self._point_t: list[float] = []
        self._point_raw: list[str | float] = []

    def add(self, series: RawSeries, name: str | None = None) -> bool:
        """File one series; False when it names no known metric or no GPU."""
        points = series.points
        number = self._file(series.labels, name or series.name, bool(points))
        if number is None:
            return False
        if number >= 0:
            self._point_series.extend(itertools.repeat(number, len(points)))
            times, raws = zip(*points, strict=True)
            self._point_t.extend(times)
            self._point_raw.extend(raws)
        return True

    def add_batch(self, batch: Batch) -> None:
        """File every series of a remote-write drain, its points as they are: arrays."""
        self._seal()
        known = self._seen.known(self.specs)
        if all(map(known.__contains__, batch.keys)):
            filings = list(map(known.__getitem__, batch.keys))
        else:  # a series not seen before: worked out one by one, and kept
            filings = [
                self._seen.filing(lb, lb.get("__name__", ""), self.specs, self.lm, self.ignore_pods, key)
                for lb, key in zip(batch.labels, batch.keys, strict=True)
            ]
        numbers = self._take_all(filings)
        series = np.repeat(numbers, np.diff(batch.bounds))
        filed = series >= 0
        if filed.any():
            self._filed.append((series[filed], batch.t_s[filed], valid_readings(batch.values[filed])))

    def _take_all(self, filings: list[Filing]) -> npt.NDArray[np.intp]:
        """``_take`` of each series (with points), as numbers (-1: none); at numpy speed where
        the assembler has no GPU yet and every identity is complete (no merging to do)."""
        ours = [f for f in filings if f.kind != NOT_OURS]
        if self.gpus or not all(map(_COMPLETE, ours)):
            return np.array([-1 if (n := self._take(f)) is None else n for f in filings], dtype=np.intp)
        self.series += len(ours)
        uuids = list(map(_UUID, ours))
        first = dict(zip(reversed(uuids), map(_IDENT, reversed(ours)), strict=True))
        self.gpus.update({u: first[u] for u in dict.fromkeys(uuids)})  # as first seen
        folds = [f for f in ours if f.kind == FOLDS]
        fold_uuids = list(map(_UUID, folds))
        numbering = self._gpu_number
        fresh = list(itertools.filterfalse(numbering.__contains__, dict.fromkeys(fold_uuids)))
        numbering.update(zip(fresh, itertools.count(len(numbering))))
        base = len(self._series_gpu)
        self._series_gpu.extend(map(numbering.__getitem__, fold_uuids))
        self._series_field.extend(map(_FIELD, folds))
        self._series_scale.extend(map(_SCALE, folds))
        self._series_holder.extend(map(_HOLDER, folds))
        fold = np.fromiter(map(_KIND, filings), np.intp, len(filings)) == FOLDS
        numbers = np.full(len(filings), -1, dtype=np.intp)
        numbers[fold] = base + np.arange(len(folds))
        return numbers

    def _file(
        self, labels: Mapping[str, str], name: str, has_points: bool, key: bytes | None = None
    ) -> int | None:
        """The number of a series with points to fold; -1 for one that names a known metric and
        a GPU but has nothing to fold (info, a process outside any pod or job, no points); None
        for one that names no known metric or no GPU."""
        f = self._seen.filing(labels, name, self.specs, self.lm, self.ignore_pods, key)
        return self._take(f, has_points)

    def _take(self, f: Filing, has_points: bool = True) -> int | None:
        ident = f.ident
        if ident is None:
            return None
        self.series += 1
        known = self.gpus.get(ident.uuid)
        if (kept := merged(known, ident)) is not known:
            self.gpus[ident.uuid] = kept
        if f.kind != FOLDS or not has_points:
            return -1
        self._series_gpu.append(self._gpu_number.setdefault(ident.uuid, len(self._gpu_number)))
        self._series_field.append(f.field)
        self._series_scale.append(f.scale)
        self._series_holder.append(f.holder)
        return len(self._series_gpu) - 1

    def _seal(self) -> None:
        """Turn the points filed one series at a time into arrays, after those filed before."""
        if self._point_t:
            self._filed.append(
                (
                    np.array(self._point_series, dtype=np.intp),
                    np.array(self._point_t, dtype=np.float64),
                    _readings(self._point_raw),
                )
            )
            self._point_series, self._point_t, self._point_raw = [], [], []

    def _drop_mig_parents(self) -> set[str]:
        parents = {g.parent for g in self.gpus.values() if g.parent}
        for p in parents:
            self.gpus.pop(p, None)
        return parents

    def slots(self) -> list[Slot]:
        """Every slot seen, oldest first; also fills ``mem_total`` per GPU."""
        dropped = self._drop_mig_parents()
        self._seal()
        if not self._filed:
            return []
        uuids = list(self._gpu_number)
        fields = sorted(set(self._series_field) - {HOLDER})
        field_of = {f: i for i, f in enumerate(fields)}
        series_holder = self._series_holder
        filed = Filed(
            np.concatenate([f[0] for f in self._filed]),
            np.concatenate([f[1] for f in self._filed]),
            np.concatenate([f[2] for f in self._filed]),
            np.array(self._series_gpu, dtype=np.intp),
            np.array([field_of.get(f, -1) for f in self._series_field], dtype=np.intp),
            np.array(self._series_scale, dtype=np.float64),
            np.array([h is not None for h in series_holder], dtype=np.bool_),
        )
        out, (gpus, totals) = fold(
            filed,
            fields,
            Numbering.of(uuids),
            np.array([u in dropped for u in uuids], dtype=np.bool_),
            lambda sids: list(map(series_holder.__getitem__, sids.tolist())),
            self.interval_s,
        )
        mem_total = self.mem_total
        for g, x in zip(gpus.tolist(), totals.tolist(), strict=True):
            if x > mem_total.get(uuids[g], 0.0):
                mem_total[uuids[g]] = x
        return out


def _readings(raws: list[str | float]) -> FloatArray:
    """Raw values as readings before scaling (``valid_readings``), read as ``float()`` reads them."""
    try:
        x = np.array(raws, dtype=np.float64)
    except (TypeError, ValueError):  # a value numpy cannot read: one at a time, as float() does
        x = np.array([_float(r) for r in raws], dtype=np.float64)
    return valid_readings(x)


def valid_readings(x: FloatArray) -> FloatArray:
    """``x`` with NaN where a reading is unusable: a sentinel, negative or not finite
    (``clean_value``'s rules, for every point at once)."""
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(x) | (x < 0) | (x >= FP64_BLANK) | ((x >= INT32_BLANK) & (x <= 0x7FFFFFFF))
    return np.where(bad, np.nan, x)


def _float(raw: str | float) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        return math.nan


def merged(known: GpuIdentity | None, ident: GpuIdentity) -> GpuIdentity:
    """A GPU's identity once another of its series names it ``ident``: the first one seen,
    blanks filled from a later one that names the model or index it lacks."""
    if known is None:
        return ident
    if (not known.model and ident.model) or (known.index < 0 <= ident.index):
        return _merge(known, ident)
    return known


def _merge(a: GpuIdentity, b: GpuIdentity) -> GpuIdentity:
    return GpuIdentity(
        a.uuid,
        a.node or b.node,
        a.index if a.index >= 0 else b.index,
        a.model or b.model,
        a.parent or b.parent,
    )
