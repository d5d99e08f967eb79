"""The assembler as it was before it folded series as columns: one Python pass per point, a
dict per cell. Kept as the reference the columnar one must match exactly
(test_assemble_columns.py); not used by gpusteward itself."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpusteward.domain import health
from gpusteward.domain.models import Metric, Sample, utc
from gpusteward.integrations.prometheus.assemble import _merge
from gpusteward.integrations.prometheus.filing import Identities
from gpusteward.integrations.prometheus.parse import (
    CLOCK_REASONS,
    GR_ENGINE,
    HOLDER,
    INFO,
    INT32_BLANK,
    MEM_FREE,
    MEM_RESERVED,
    MEM_TOTAL,
    REMAPPED_CORR,
    REMAPPED_UNC,
    RETIRED_DBE,
    RETIRED_PENDING,
    RETIRED_SBE,
    SAMPLE_FIELDS,
    GpuIdentity,
    Holder,
    LabelMap,
    MetricSpec,
    clean_value,
)
from gpusteward.integrations.prometheus.query import RawSeries

_XID, _XID_FATAL, _RETIRED = Metric.XID.value, Metric.XID_FATAL.value, Metric.RETIRED_PAGES.value
_REMAP_FAILURE, _THROTTLED = Metric.REMAP_FAILURE.value, Metric.THROTTLED.value


@dataclass(slots=True)
class _Cell:
    """The newest value of each field of one GPU in one slot, and who held it then."""

    at: float = -math.inf
    values: dict[str, float] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)
    holder: Holder | None = None
    holder_at: float = -math.inf


@dataclass(frozen=True, slots=True)
class RefSlot:
    start_s: float
    samples: tuple[Sample, ...]
    holders: Mapping[str, Holder | None]


class ReferenceAssembler:
    """Folds series into GPUs and one sample per GPU per slot of ``interval_s``.

    A MIG parent whose instances are seen is dropped: the instances are the GPUs.
    Utilisation falls back to the graphics-engine ratio where GPU_UTIL is absent.
    """

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
        self.cells: dict[tuple[int, str], _Cell] = {}
        self.series = 0
        # A label set seen before (this tick or an earlier one) is identified once.
        self._seen = identities if identities is not None else Identities()

    def add(self, series: RawSeries, name: str | None = None) -> bool:
        """Fold one series in; False when it names no known metric or no GPU."""
        spec = self.specs.get(name or series.name)
        if spec is None:
            return False
        ident, holder = self._seen.identify(series.labels, self.lm, self.ignore_pods)
        if ident is None:
            return False
        self.series += 1
        known = self.gpus.get(ident.uuid)
        if known is None or (not known.model and ident.model) or (known.index < 0 <= ident.index):
            self.gpus[ident.uuid] = ident if known is None else _merge(known, ident)
        if spec.field == INFO:
            return True
        if spec.field == HOLDER and holder is None:
            return True  # a process outside any pod or job: not a workload this source knows
        interval, uuid, fname, scale = self.interval_s, ident.uuid, spec.field, spec.scale
        cells = self.cells
        cell: _Cell | None = None
        prev, have = None, False
        # Newest first: per slot, the holder of the newest point and the newest valid value.
        for t, raw in reversed(series.points):
            slot = int((t + 1e-6) // interval)
            if slot != prev:
                prev, have = slot, fname == HOLDER
                cell = cells.get((slot, uuid))
                if cell is None:
                    cell = cells[(slot, uuid)] = _Cell()
                if t > cell.holder_at or (t == cell.holder_at and holder is not None):
                    cell.holder, cell.holder_at = holder, t
            if have:
                continue
            try:
                x = float(raw)
            except ValueError:
                continue
            if 0.0 <= x < INT32_BLANK:  # the common case, without a call
                v = x * scale
            else:
                w = clean_value(x, scale)
                if w is None:
                    continue
                v = w
            have = True
            assert cell is not None
            old = cell.times.get(fname)
            if old is None or t >= old:
                cell.values[fname], cell.times[fname] = v, t
                if t > cell.at:
                    cell.at = t
        return True

    def _drop_mig_parents(self) -> set[str]:
        parents = {g.parent for g in self.gpus.values() if g.parent}
        for p in parents:
            self.gpus.pop(p, None)
        return parents

    def slots(self) -> list[RefSlot]:
        """Every slot seen, oldest first; also fills ``mem_total`` per GPU."""
        dropped = self._drop_mig_parents()
        by_slot: dict[int, tuple[list[Sample], dict[str, Holder | None]]] = {}
        util, used, mem_total = Metric.GPU_UTIL.value, Metric.MEM_USED.value, self.mem_total
        for (slot, uuid), cell in self.cells.items():
            if uuid in dropped:
                continue
            group = by_slot.get(slot)
            if group is None:
                group = by_slot[slot] = ([], {})
            group[1][uuid] = cell.holder
            vals = cell.values
            if MEM_TOTAL in vals or MEM_FREE in vals:
                total = vals.get(MEM_TOTAL)
                if total is None and used in vals:
                    total = vals[used] + vals[MEM_FREE] + vals.get(MEM_RESERVED, 0.0)
                if total is not None and total > mem_total.get(uuid, 0.0):
                    mem_total[uuid] = total
            if util not in vals and GR_ENGINE in vals:
                vals[util] = vals[GR_ENGINE]
            derive_health(vals)
            fields = {k: v for k, v in vals.items() if k in SAMPLE_FIELDS}
            if fields:
                group[0].append(Sample(gpu_uuid=uuid, at=utc(cell.at), **fields))
        return [
            RefSlot(slot * self.interval_s, tuple(sorted(samples, key=lambda s: s.gpu_uuid)), dict(holders))
            for slot, (samples, holders) in sorted(by_slot.items())
        ]


def derive_health(values: dict[str, float]) -> None:
    """Fold one GPU's health parts into ``Sample`` fields, in place. A field stays absent
    (None) unless a series fed it: no health series is no reading, never a healthy 0."""
    xid = values.get(_XID)
    if xid is not None and _XID_FATAL not in values:
        values[_XID_FATAL] = float(health.xid_fatal(int(xid)))
    if _RETIRED not in values:
        # Remapped rows (Ampere and newer) where the GPU has them, else retired pages.
        for parts in ((REMAPPED_CORR, REMAPPED_UNC), (RETIRED_SBE, RETIRED_DBE)):
            known = [values[p] for p in parts if p in values]
            if known:
                values[_RETIRED] = sum(known)
                break
    if RETIRED_PENDING in values:
        pending = float(values[RETIRED_PENDING] > 0)
        values[_REMAP_FAILURE] = max(values.get(_REMAP_FAILURE, 0.0), pending)
    reasons = values.get(CLOCK_REASONS)
    if reasons is not None and _THROTTLED not in values:
        values[_THROTTLED] = float(health.throttled(int(reasons)))
