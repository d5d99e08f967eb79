"""Folding exporter series into gpusteward's view: ``Assembler`` turns many series into one
``Sample`` per GPU per window slot (newest value of each field in the slot, at the time of the
newest of them) and the holder of each GPU in that slot; ``build_workloads`` turns the holders
into workloads. Pure, like ``parse``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

from gpusteward.domain.classes import CLASS_KEY
from gpusteward.domain.models import Gpu, Metric, Owner, Sample, Workload, WorkloadKind, utc
from gpusteward.integrations.prometheus.parse import (
    GR_ENGINE,
    HOLDER,
    INFO,
    INT32_BLANK,
    MEM_FREE,
    MEM_RESERVED,
    MEM_TOTAL,
    SAMPLE_FIELDS,
    GpuIdentity,
    Holder,
    LabelMap,
    MetricSpec,
    clean_value,
    derive_health,
    identify_gpu,
    identify_holder,
)
from gpusteward.integrations.prometheus.query import RawSeries


@dataclass(slots=True)
class _Cell:
    """The newest value of each field of one GPU in one slot, and who held it then."""

    at: float = -math.inf
    values: dict[str, float] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)
    holder: Holder | None = None
    holder_at: float = -math.inf


class Identities:
    """The GPU and holder each label set names, kept across ticks: a series comes back with the
    same labels every scrape, so it is identified once, not once per tick. Emptied when it grows
    past ``max_entries`` (pods come and go; the next tick identifies what is still there)."""

    def __init__(self, max_entries: int = 1_000_000) -> None:
        self.max_entries = max_entries
        self._known: dict[frozenset[tuple[str, str]], tuple[GpuIdentity | None, Holder | None]] = {}

    def identify(
        self, labels: Mapping[str, str], lm: LabelMap, ignore_pods: re.Pattern[str] | None
    ) -> tuple[GpuIdentity | None, Holder | None]:
        # The whole label set, metric name included: cheaper to key on than to filter the name out.
        key = frozenset(labels.items())
        known = self._known.get(key)
        if known is None:
            if len(self._known) >= self.max_entries:
                self._known.clear()
            gpu_id = identify_gpu(labels, lm)
            holder = identify_holder(labels, lm, ignore_pods) if gpu_id else None
            known = self._known[key] = (gpu_id, holder)
        return known

    def __len__(self) -> int:
        return len(self._known)


@dataclass(frozen=True, slots=True)
class Slot:
    """What the series say about one window slot: a sample and a holder per GPU."""

    start_s: float
    samples: tuple[Sample, ...]
    holders: Mapping[str, Holder | None]


class Assembler:
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

    def slots(self) -> list[Slot]:
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
            Slot(slot * self.interval_s, tuple(sorted(samples, key=_by_uuid)), MappingProxyType(holders))
            for slot, (samples, holders) in sorted(by_slot.items())
        ]

    def gpu(self, uuid: str) -> Gpu:
        g = self.gpus[uuid]
        return Gpu(
            uuid=uuid,
            node=g.node or "?",
            index=g.index,
            model=g.model or "unknown",
            memory_total_mib=self.mem_total.get(uuid, 0.0),
        )


def _by_uuid(s: Sample) -> str:
    return s.gpu_uuid


def _merge(a: GpuIdentity, b: GpuIdentity) -> GpuIdentity:
    return GpuIdentity(
        a.uuid,
        a.node or b.node,
        a.index if a.index >= 0 else b.index,
        a.model or b.model,
        a.parent or b.parent,
    )


_NO_LABELS: Mapping[str, str] = MappingProxyType({})


def build_workloads(
    holders: Mapping[str, Holder | None],
    started: Mapping[str, datetime],
    node_of: Mapping[str, str],
    default_class: str = "unknown",
) -> tuple[Workload, ...]:
    """One workload per holder, with the GPUs it holds. ``started`` must name every holder.
    A pod gets ``default_class`` (the series say nothing of its owner's kind)."""
    pod_labels = _NO_LABELS if default_class == "unknown" else MappingProxyType({CLASS_KEY: default_class})
    grouped: dict[str, tuple[Holder, list[str]]] = {}
    for uuid, h in holders.items():
        if h is not None:
            grouped.setdefault(h.id, (h, []))[1].append(uuid)
    out = []
    for wid, (h, uuids) in sorted(grouped.items()):
        uuids.sort()
        ref = {"node": node_of.get(uuids[0], "")}
        if h.kind is WorkloadKind.POD:
            ref.update(namespace=h.namespace, pod=h.name, container=h.container)
            if h.pod_uid:
                ref["pod_uid"] = h.pod_uid
        else:
            ref["job_id"] = h.name
        out.append(
            Workload(
                id=wid,
                kind=h.kind,
                name=h.name,
                owner=Owner(user=h.user, team=h.namespace),
                gpus_requested=len(uuids),
                gpu_uuids=tuple(uuids),
                started_at=started[wid],
                source="prometheus",
                labels=pod_labels if h.kind is WorkloadKind.POD else _NO_LABELS,
                annotations=_NO_LABELS,
                ref=MappingProxyType(ref),
            )
        )
    return tuple(out)
