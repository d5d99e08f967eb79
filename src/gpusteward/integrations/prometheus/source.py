"""The ``prometheus`` source: start-up backfill by range queries, then incremental fetches.

Start-up (``history``) reads the window with one ``query_range`` per metric of
``last_over_time(m[step])``: at most one point per window slot, and only where a real
sample fell in that slot, so a gap stays a gap. Each tick (``observe``) reads the raw
samples since the last fetch with one instant range-selector query
(``{__name__=~"..."}[65s]``), whose points carry their real scrape times: a GPU whose
exporter stopped gets no fresh-looking sample.

Queries are split by GPU uuid (``shard_patterns``) so that none loads more than
``max_samples_per_query``; a server that still refuses one for its size gets it split
further. When some shards fail the tick goes on with the others; their GPUs go stale.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from gpusteward.domain.errors import SourceError
from gpusteward.domain.models import Gpu, Observation, Sample, Workload, utc
from gpusteward.domain.sample_table import SampleTable
from gpusteward.integrations.prometheus.assemble import Assembler, GpuView
from gpusteward.integrations.prometheus.cells import Slot
from gpusteward.integrations.prometheus.client import PrometheusClient, QueryResult, TooManySamples
from gpusteward.integrations.prometheus.filing import Identities
from gpusteward.integrations.prometheus.holder_book import HolderBook
from gpusteward.integrations.prometheus.parse import (
    DEFAULT_SPECS,
    REQUEST_COUNTERS,
    GpuIdentity,
    Holder,
    LabelMap,
    MetricSpec,
    clean_value,
    identify_holder,
)
from gpusteward.integrations.prometheus.query import (
    RawSeries,
    as_ms,
    names_regex,
    quoted,
    range_chunks,
    shard_patterns,
)
from gpusteward.integrations.prometheus.workloads import build_workloads

log = logging.getLogger(__name__)

MAX_SHARDS = 256
#: Assumed scrape interval when sizing queries (dcgm-exporter's default is 30 s; be safe).
SCRAPE_GUESS_S = 10.0


@dataclass
class _Fetched:
    series: list[tuple[RawSeries, str | None]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    queries: int = 0


class PrometheusSource:
    """Implements ``gpusteward.domain.ports.Source`` over a Prometheus-compatible API."""

    name = "prometheus"

    def __init__(
        self,
        client: PrometheusClient,
        *,
        interval_s: float,
        window_s: float,
        specs: Mapping[str, MetricSpec] = DEFAULT_SPECS,
        labels: LabelMap | None = None,
        max_samples_per_query: int = 5_000_000,
        overlap_s: float = 15.0,
        step_s: float | None = None,
        selector: str = "",
        exporter_pod_regex: str | None = "(nvidia-)?dcgm-exporter.*",
        default_class: str = "unknown",
        request_metrics: Sequence[str] = REQUEST_COUNTERS,
    ) -> None:
        self.client = client
        self.interval_s = float(interval_s)
        self.window_s = float(window_s)
        self.specs = dict(specs)
        self.labels = labels or LabelMap()
        self.max_samples = max_samples_per_query
        self.overlap_s = overlap_s
        self.step_s = step_s
        self.selector = selector.strip().strip(",")
        self.default_class = default_class
        self.request_metrics = tuple(request_metrics)
        self.ignore_pods = re.compile(exporter_pod_regex) if exporter_pod_regex else None
        self._names = names_regex(self.specs)
        self._cursor: datetime | None = None
        self._series = 0
        self._min_shards = 1
        self._gpus: dict[str, Gpu] = {}
        self._gpu_tuple: tuple[Gpu, ...] | None = None  # _gpu_list's
        self._absorbed: dict[str, GpuIdentity] = {}  # each GPU's identity as last absorbed
        self._identities = Identities()
        self._book = HolderBook()  # each GPU's holder, since when, and its newest sample
        # The workloads only change with a holder (or a forgotten GPU): built again only then.
        self._workload_cache: tuple[Workload, ...] | None = None
        #: Queries sent so far (each uuid shard counts).
        self.queries = 0

    def close(self) -> None:
        self.client.close()

    @property
    def shards(self) -> int:
        """The fewest uuid shards a query is split into, after any refusal for size."""
        return self._min_shards

    # -- queries ------------------------------------------------------------------

    def _matchers(self, *extra: str) -> str:
        return ",".join(m for m in (*extra, self.selector) if m)

    def _fetch(
        self,
        expr_for: Callable[[str], str],
        call: Callable[[str], QueryResult],
        samples: float,
        name: str | None,
    ) -> _Fetched:
        """Run ``expr_for(shard matcher)`` over as many uuid shards as ``samples`` needs.

        Stops at the first failing query (a down or slow server would fail them all).
        """
        n = max(self._min_shards, math.ceil(samples / self.max_samples))
        while True:
            patterns = shard_patterns(min(n, MAX_SHARDS))
            exprs = (
                [expr_for("")]
                if len(patterns) == 1
                else [expr_for(f"{label}=~{quoted(p)}") for p in patterns for label in self.labels.uuid]
            )
            out = _Fetched(queries=len(exprs))
            try:
                for expr in exprs:
                    self.queries += 1
                    res = call(expr)
                    out.series.extend((s, name) for s in res.series)
                    out.warnings.extend(res.warnings)
            except TooManySamples as e:
                if len(patterns) >= MAX_SHARDS:
                    out.errors.append(str(e))
                    return out
                n = self._min_shards = min(MAX_SHARDS, max(4, len(patterns) * 4))
                log.info("prometheus refused a query for its size; splitting into %d shards", n)
                continue
            except SourceError as e:
                out.errors.append(str(e))
            return out

    def _count_series(self, at: datetime) -> dict[str, int]:
        expr = f"count by (__name__) ({{{self._matchers(f'__name__=~{quoted(self._names)}')}}})"
        res = self.client.query(expr, at)
        return {s.name: int(float(s.points[-1][1])) for s in res.series if s.points}

    # -- state --------------------------------------------------------------------

    def _absorb_gpus(self, asm: GpuView) -> None:
        # An identity object absorbed before (the cached identities hand back the same one)
        # made the GPU kept: only its memory total can have grown since.
        last, mem = self._absorbed, asm.mem_total
        for uuid, ident in asm.gpus.items():
            old = self._gpus.get(uuid)
            if old is not None and (
                (last.get(uuid) is ident and old.memory_total_mib >= mem.get(uuid, 0.0))
                or asm.kept(uuid, old)
            ):
                continue
            gpu = asm.gpu(uuid)
            if old is not None and old.memory_total_mib > gpu.memory_total_mib:
                gpu = Gpu(gpu.uuid, gpu.node, gpu.index, gpu.model, old.memory_total_mib)
            # An unchanged GPU stays the same object: the loop prices it once, not every tick.
            if old != gpu:
                self._gpus[uuid] = gpu
                self._gpu_tuple = None
        last.update(asm.gpus)

    def _gpu_list(self) -> tuple[Gpu, ...]:
        """The GPUs known, as the same tuple for as long as none changes: the loop prices and
        registers the GPUs of an observation only when it gets another tuple."""
        if self._gpu_tuple is None:
            self._gpu_tuple = tuple(self._gpus.values())
        return self._gpu_tuple

    # The per-GPU bookkeeping lives in its book (holder_book.py); these names are the source's.
    def _apply(self, slot: Slot) -> bool:
        return self._book.apply(slot)

    @property
    def _holders(self) -> dict[str, Holder | None]:
        return self._book.holders

    @property
    def _started(self) -> dict[str, datetime]:
        return self._book.started

    @property
    def _holder_at(self) -> dict[str, float]:
        return self._book.holder_at

    @property
    def _last_seen(self) -> dict[str, float]:
        return self._book.last_seen

    def _forget(self, before_s: float, changed: bool = True) -> list[str]:
        """GPUs silent for a whole window are gone (returned); so are workloads that hold
        nothing. ``changed``: whether a holder changed since the last call (none: every
        workload started still holds a GPU, unless a GPU goes now)."""
        seen = self._last_seen
        gone: list[str] = []
        if seen and min(seen.values()) < before_s:
            gone = [u for u, t in seen.items() if t < before_s]
            for uuid in gone:
                for d in (self._gpus, self._absorbed):
                    d.pop(uuid, None)
            self._book.forget(gone)
            self._workload_cache, self._gpu_tuple, changed = None, None, True
        if changed:
            holding = {h.id for h in self._holders.values() if h is not None}
            for wid in [w for w in self._started if w not in holding]:
                del self._started[wid]
        return gone

    def _workloads(self, changed: bool = True) -> tuple[Workload, ...]:
        if changed or self._workload_cache is None:
            node_of = {u: g.node for u, g in self._gpus.items()}
            self._workload_cache = build_workloads(self._holders, self._started, node_of, self.default_class)
        return self._workload_cache

    def _assembler(self) -> Assembler:
        return Assembler(self.specs, self.labels, self.interval_s, self.ignore_pods, self._identities)

    # -- the Source protocol ------------------------------------------------------

    def observe(self, now: datetime) -> Observation:
        """The raw samples since the last fetch (plus an overlap), as of ``now``."""
        if self._cursor is None:
            span = 2 * self.interval_s
        else:
            span = (now - self._cursor).total_seconds() + self.overlap_s
        span = min(self.window_s, max(self.interval_s, span))
        names = f"__name__=~{quoted(self._names)}"
        estimate = max(self._series, 1) * (span / SCRAPE_GUESS_S + 1)
        got = self._fetch(
            lambda shard: f"{{{self._matchers(names, shard)}}}[{as_ms(span)}]",
            lambda expr: self.client.query(expr, now),
            estimate,
            None,
        )
        if got.errors and not got.series:
            raise SourceError(got.errors[0])
        asm = self._assembler()
        for s, _ in got.series:
            asm.add(s)
        slots = asm.slots()
        self._absorb_gpus(asm)
        changed = False
        for slot in slots:
            changed = self._apply(slot) or changed
        self._forget(now.timestamp() - self.window_s, changed)
        if not got.errors:
            self._cursor = now
            self._series = asm.series
        errors = got.errors + [f"prometheus warning: {w}" for w in got.warnings]
        samples: Sequence[Sample] = SampleTable.concat([slot.samples for slot in slots])
        if self.request_metrics:
            samples = tuple(self._with_requests(list(samples), now, errors))
        return Observation(
            at=now,
            gpus=self._gpu_list(),
            samples=samples,
            workloads=self._workloads(changed),
            errors=tuple(errors),
        )

    def _with_requests(self, samples: list[Sample], now: datetime, errors: list[str]) -> list[Sample]:
        """Each GPU's newest sample of this tick with its holder's request rate (summed over the
        holder's request counters), where the holder serves any. Pods without such a counter
        keep ``requests_per_s`` missing: no request metric is not zero requests."""
        window = as_ms(max(4 * SCRAPE_GUESS_S, 2 * self.interval_s))
        names = f"__name__=~{quoted(names_regex(self.request_metrics))}"
        try:
            res = self.client.query(f"rate({{{self._matchers(names)}}}[{window}])", now)
        except SourceError as e:
            errors.append(f"request metrics: {e}")
            return samples
        rates: dict[str, float] = {}
        for series in res.series:
            holder = identify_holder(series.labels, self.labels, self.ignore_pods)
            value = clean_value(series.points[-1][1], 1.0) if series.points else None
            if holder is not None and value is not None:
                rates[holder.id] = rates.get(holder.id, 0.0) + value
        if not rates:
            return samples
        newest: dict[str, int] = {}
        for i, s in enumerate(samples):
            if s.gpu_uuid not in newest or s.at >= samples[newest[s.gpu_uuid]].at:
                newest[s.gpu_uuid] = i
        for uuid, i in newest.items():
            holder = self._holders.get(uuid)
            if holder is not None and holder.id in rates:
                samples[i] = replace(samples[i], requests_per_s=rates[holder.id])
        return samples

    def history(self, start: datetime, end: datetime, step_s: float) -> list[Observation]:
        """The window before ``end``, one observation per slot. Never raises: a failed
        backfill leaves the window to fill from ticks."""
        step = float(self.step_s or step_s)
        first = math.ceil(start.timestamp() / step) * step + step
        if first > end.timestamp():
            return []
        try:
            counts = self._count_series(end)
        except SourceError as e:
            log.warning("prometheus backfill skipped: %s", e)
            return []
        asm = self._assembler()
        errors: list[str] = []
        for name in sorted(n for n, c in counts.items() if c > 0 and n in self.specs):
            for lo, hi in range_chunks(first, end.timestamp(), step):
                got = self._backfill_one(name, lo, hi, step, counts[name])
                errors.extend(got.errors)
                for s, _ in got.series:
                    # last_over_time(m[step]) at t is the newest sample in (t - step, t]:
                    # date it at the start of that span, never newer than it was.
                    asm.add(RawSeries(s.labels, [(t - step, v) for t, v in s.points]), name)
        for err in errors[:5]:
            log.warning("prometheus backfill: %s", err)
        slots = asm.slots()
        self._absorb_gpus(asm)
        out = []
        workloads: tuple[Workload, ...] | None = None
        for slot in slots:
            # Each slot carries the holders as of that slot: the window drops a GPU's
            # history when its holder changes, so a new job is not judged on the last one's.
            if self._apply(slot) or workloads is None:
                workloads = self._workloads()
            gpus = tuple(self._gpus[u] for u in slot.samples.uuids if u in self._gpus)
            out.append(
                Observation(at=utc(slot.start_s), gpus=gpus, samples=slot.samples, workloads=workloads)
            )
        self._forget(end.timestamp() - self.window_s)
        self._cursor = end
        self._series = asm.series
        return out

    def _backfill_one(self, name: str, lo: float, hi: float, step: float, series: int) -> _Fetched:
        window = as_ms(step)
        steps = (hi - lo) / step + 1

        def expr(shard: str) -> str:
            return f"last_over_time({name}{{{self._matchers(shard)}}}[{window}])"

        return self._fetch(
            expr,
            lambda e: self.client.query_range(e, utc(lo), utc(hi), step),
            series * steps * (1 + step / SCRAPE_GUESS_S),
            name,
        )
