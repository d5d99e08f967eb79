"""One analysis tick: window view + compiled rules + GPUs + workloads + now -> findings.

Pure: no I/O and no clock. Rules see *holdings*, one element per GPU of each workload,
so only held GPUs are judged and a GPU shared by two workloads is judged for each.

Safety, in order: a GPU without a fresh sample (``stale_after_s``) or without enough
data over a rule's window (``min_coverage``) is never part of that rule's finding; a
gpu-scope reclaim rule with ``require_all_gpus`` reports a workload only when every
GPU it holds trips (a job busy on some GPUs is never stopped; ``overprovisioned``
advises instead); a workload-scope rule needs every GPU of the workload judged.
"""

from __future__ import annotations

import gc
import itertools
import math
import os
import string
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.classes import CLASSES, workload_class
from gpusteward.analysis.evidence import evidence_texts
from gpusteward.analysis.expr import Aggregate, EvalContext, FloatArray, format_duration
from gpusteward.analysis.rules import CompiledRule
from gpusteward.domain.models import Finding, Gpu, Metric, RuleAction, Workload
from gpusteward.store.window import WindowView

BoolArray = npt.NDArray[np.bool_]
_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(frozen=True)
class AnalysisInput:
    view: WindowView
    gpus: Mapping[str, Gpu]
    workloads: Sequence[Workload]
    now: datetime
    stale_after_s: float = 120.0


@dataclass(frozen=True)
class AnalysisResult:
    findings: tuple[Finding, ...]
    #: Held GPUs without a sample newer than ``stale_after_s`` (or never seen).
    stale_gpus: frozenset[str]
    #: Workloads holding any stale GPU: nothing can be said about them this tick.
    unknown_workloads: frozenset[str]
    #: Per rule, the workloads it could not judge (a GPU stale or short of coverage, as
    #: at start-up or after a holder change): no finding from that rule is not evidence
    #: that its waste has ended.
    unjudged: Mapping[str, frozenset[str]] = field(default_factory=dict)


class _Holdings:
    """The (workload, GPU) pairs every rule is evaluated over, grouped by workload."""

    def __init__(self, inp: AnalysisInput) -> None:
        self.workloads = list(inp.workloads)
        # A workload's gpu_uuids are unique (sources guarantee it); a duplicate would only
        # be listed twice in a finding, never change what trips.
        per = [w.gpu_uuids for w in self.workloads]
        sizes = np.fromiter(map(len, per), dtype=np.intp, count=len(per))
        self.uuids: list[str] = list(itertools.chain.from_iterable(per))
        self.group = np.repeat(np.arange(len(per), dtype=np.intp), sizes)
        self.group_size: FloatArray = sizes.astype(np.float64)
        self.gpu_index = inp.view.indices_of(self.uuids)
        self.gpus = inp.gpus
        self.now = inp.now
        self._classes: npt.NDArray[np.intp] | None = None

    def class_codes(self) -> npt.NDArray[np.intp]:
        """Per holding, the index in ``CLASSES`` of its workload's class (computed once)."""
        if self._classes is None:
            codes = {c: i for i, c in enumerate(CLASSES)}
            per = np.fromiter(
                (codes[workload_class(w)] for w in self.workloads), np.intp, len(self.workloads)
            )
            self._classes = per[self.group]
        return self._classes

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
        counts = np.bincount(self.group, weights=mask, minlength=len(self.workloads))
        out: BoolArray = counts >= self.group_size
        return out

    def ids(self, groups: npt.NDArray[np.intp]) -> frozenset[str]:
        ws = self.workloads
        return frozenset(ws[g].id for g in groups.tolist())


class _PerRule(Mapping[str, frozenset[str]]):
    """Rule name -> workload ids, built on first access: most ticks never ask."""

    def __init__(self, masks: dict[str, BoolArray], h: _Holdings) -> None:
        self._masks, self._h, self._sets = masks, h, dict[str, frozenset[str]]()

    def __getitem__(self, rule: str) -> frozenset[str]:
        if rule not in self._sets:
            self._sets[rule] = self._h.ids(np.flatnonzero(self._masks[rule]))
        return self._sets[rule]

    def __iter__(self) -> Iterator[str]:
        return iter(self._masks)

    def __len__(self) -> int:
        return len(self._masks)


def _fmt(v: float, digits: int = 0) -> str:
    if not math.isfinite(v):
        return "?"
    return str(round(v)) if digits == 0 else f"{v:.2f}" if digits == 2 else f"{v:.1f}"


def _judged(rule: CompiledRule, ctx: EvalContext, fresh: BoolArray) -> BoolArray:
    """Holdings with fresh data covering enough of the rule's window for every metric it reads."""
    ok = fresh.copy()
    if rule.window_s > 0:
        for m in sorted(rule.metrics):
            cov = ctx.aggregate(Aggregate("coverage", m, (rule.window_s,)))
            with np.errstate(invalid="ignore"):
                ok &= cov >= rule.spec.min_coverage - 1e-9
    return ok


def _trips(
    rule: CompiledRule, ctx: EvalContext, h: _Holdings, fresh: BoolArray
) -> tuple[BoolArray, BoolArray]:
    """Which holdings trip the rule, and which workloads it judged on every GPU."""
    judged = _judged(rule, ctx, fresh)
    all_judged = h.group_all(judged)
    if not judged.any():  # e.g. a window longer than the store keeps: nothing can trip
        return judged, all_judged
    if rule.spec.classes:
        judged = judged & np.isin(h.class_codes(), [CLASSES.index(c) for c in rule.spec.classes])
        if not judged.any():
            return judged, all_judged
    trip = rule.when.evaluate_bool(ctx) & judged
    if rule.spec.scope == "workload":
        trip &= all_judged[h.group]
    elif rule.spec.require_all_gpus and rule.action is RuleAction.RECLAIM:
        trip &= h.group_all(trip)[h.group]
    return trip, all_judged


def _group_bounds(groups: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """Start of each run of equal values in ``groups`` (already grouped), plus the end."""
    change = np.flatnonzero(groups[1:] != groups[:-1]) + 1
    return np.concatenate(([0], change, [groups.size])).astype(np.intp)


def _findings(rule: CompiledRule, ctx: EvalContext, h: _Holdings, trip: BoolArray) -> list[Finding]:
    """One finding per workload with tripping holdings. Numbers are computed in numpy and
    every per-finding value column by column, so the Python work per finding is small."""
    tp = np.flatnonzero(trip)
    if tp.size == 0:
        return []
    groups = h.group[tp]
    bounds = _group_bounds(groups)
    starts = bounds[:-1]
    sizes = np.diff(bounds)
    if rule.waste is not None:
        waste = np.nan_to_num(rule.waste.evaluate_num(ctx)[tp], nan=0.0, posinf=0.0, neginf=0.0)
        minutes = np.minimum.reduceat(np.maximum(waste, 0.0), starts)
    else:
        minutes = np.full(starts.size, rule.window_s / 60.0)
    uuids = list(map(h.uuids.__getitem__, tp.tolist()))
    known = list(map(h.gpus.get, uuids))
    prices = np.fromiter((0.0 if g is None else g.price_per_hour for g in known), np.float64, len(known))
    counts = sizes.tolist()
    workloads = list(map(h.workloads.__getitem__, groups[starts].tolist()))
    held = h.group_size[groups[starts]].astype(int).tolist()
    # A workload tripping on every GPU it holds (all of a reclaim rule's findings) lists
    # exactly its own tuple: share it rather than build an equal one.
    bl = bounds.tolist()
    gpu_uuids = [
        w.gpu_uuids if k == n_held else tuple(uuids[lo:hi])
        for w, k, n_held, lo, hi in zip(workloads, counts, held, bl[:-1], bl[1:], strict=True)
    ]
    cols = _Columns(
        tp=tp,
        starts=starts,
        counts=counts,
        workloads=workloads,
        held=held,
        minutes=minutes.tolist(),
        gpu_hours=(minutes / 60.0 * sizes).tolist(),
        cost=(np.add.reduceat(prices, starts) * minutes / 60.0).tolist(),
        uuids=uuids,
        gpu_uuids=gpu_uuids,
    )
    # Each finding's evidence: aggregate text -> {uuid: value}. ``zip(gpu_uuids, values)``
    # stops at the end of the finding's GPUs without drawing from the shared iterator.
    per_aggregate: list[list[dict[str, float]]] = []
    for agg in rule.when.aggregates:
        vals = ctx.aggregate(agg)[tp]
        it = iter(vals.tolist())
        if np.isnan(vals).any():  # a missing value is left out rather than reported as NaN
            per_aggregate.append(
                [{u: v for u, v in zip(gu, it, strict=False) if v == v} for gu in cols.gpu_uuids]
            )
        else:
            per_aggregate.append([dict(zip(gu, it, strict=False)) for gu in cols.gpu_uuids])
    texts = [agg.text for agg in rule.when.aggregates]
    n = len(counts)
    evidence: list[dict[str, dict[str, float]]]
    if len(texts) == 1:
        evidence = [{texts[0]: d} for d in per_aggregate[0]]
    elif texts:
        evidence = [dict(zip(texts, ds, strict=True)) for ds in zip(*per_aggregate, strict=True)]
    else:
        evidence = [{} for _ in range(n)]
    messages = _messages(rule, ctx, known, cols)
    # Positionally, in Finding's field order: keyword arguments cost more per finding.
    return list(
        map(
            Finding,
            itertools.repeat(rule.name, n),
            itertools.repeat(rule.kind, n),
            itertools.repeat(rule.action, n),
            itertools.repeat(h.now, n),
            cols.gpu_uuids,
            [w.id for w in cols.workloads],
            evidence,
            cols.minutes,
            cols.gpu_hours,
            cols.cost,
            messages,
        )
    )


def _chunks(items: list[_T], counts: list[int], make: Callable[[Iterator[_T]], _R]) -> list[_R]:
    """``make`` over consecutive runs of ``counts[i]`` items each."""
    it = iter(items)
    return [make(itertools.islice(it, k)) for k in counts]


@dataclass
class _Columns:
    """Per-finding values of one rule, one list each, in finding order."""

    tp: npt.NDArray[np.intp]  # the tripping holdings, grouped by finding
    starts: npt.NDArray[np.intp]  # each finding's first position in ``tp``
    counts: list[int]  # how many tripping holdings each finding has
    workloads: list[Workload]
    held: list[int]
    minutes: list[float]
    gpu_hours: list[float]
    cost: list[float]
    uuids: list[str]  # of every tripping holding
    gpu_uuids: list[tuple[str, ...]]


def _positional(template: str) -> tuple[str, list[str]]:
    """``"{gpu} for {minutes}"`` -> ``("{0} for {1}", ["gpu", "minutes"])``."""
    names: list[str] = []
    out: list[str] = []
    for literal, name, _, _ in string.Formatter().parse(template):
        out.append(literal.replace("{", "{{").replace("}", "}}"))
        if name is not None:
            if name not in names:
                names.append(name)
            out.append(f"{{{names.index(name)}}}")
    return "".join(out), names


def _fmt_all(values: list[float], digits: int = 0) -> list[str]:
    """``_fmt`` of each value. Whole numbers depend only on the value (-0.0 and 0.0 both
    give "0"), so each distinct one is formatted once: waste minutes repeat a lot."""
    if digits:
        return [_fmt(v, digits) for v in values]
    memo = {v: _fmt(v) for v in set(values)}
    return list(map(memo.__getitem__, values))


def _messages(rule: CompiledRule, ctx: EvalContext, known: list[Gpu | None], cols: _Columns) -> list[str]:
    """The rule's message for every finding, computing only the placeholders it uses."""
    # Folded YAML leaves line breaks and runs of spaces: normalise the template once.
    template = " ".join((rule.spec.message or "{rule}: {gpu} ({kind}) for {minutes} min").split())
    fmt, names = _positional(template)
    n = len(cols.counts)

    def column(name: str) -> list[str]:
        if name in ("rule", "kind"):
            return [rule.name if name == "rule" else rule.kind] * n
        if name == "window":
            return [format_duration(rule.window_s) if rule.window_s > 0 else "-"] * n
        if name in ("workload", "workload_id", "requested"):
            attr = {"workload": "name", "workload_id": "id", "requested": "gpus_requested"}[name]
            return [str(getattr(w, attr)) for w in cols.workloads]
        if name in ("owner", "team"):
            return [getattr(w.owner, "user" if name == "owner" else "team") for w in cols.workloads]
        if name == "gpu":
            display = [u if g is None else g.display for u, g in zip(cols.uuids, known, strict=True)]
            return _chunks(display, cols.counts, ", ".join)
        if name == "node":
            nodes = [None if g is None else g.node for g in known]
            return [
                ", ".join(dict.fromkeys(x for x in ns if x)) or "?"
                for ns in _chunks(nodes, cols.counts, list)
            ]
        if name == "util":
            window = (rule.window_s,)
            util = (
                Aggregate("mean", Metric.GPU_UTIL, window)
                if rule.window_s > 0
                else Aggregate("last", Metric.GPU_UTIL)
            )
            # fmax skips NaN like the max of the present values; all missing is NaN: "?".
            return _fmt_all(np.fmax.reduceat(ctx.aggregate(util)[cols.tp], cols.starts).tolist())
        if name == "mem_gib":
            mem = ctx.aggregate(Aggregate("last", Metric.MEM_USED))[cols.tp].tolist()
            present = _chunks(mem, cols.counts, lambda vs: [v for v in vs if v == v])
            return [_fmt(sum(vs) / 1024.0, 1) if vs else "?" for vs in present]
        if name == "gpus":
            return [str(k) for k in cols.counts]
        if name in ("held", "busy", "suggest_gpus"):
            counts = cols.held
            if name != "held":
                counts = [held - k for held, k in zip(cols.held, cols.counts, strict=True)]
            return [str(max(1, x) if name == "suggest_gpus" else x) for x in counts]
        if name == "minutes":
            return _fmt_all(cols.minutes)
        if name == "evidence":
            return evidence_texts(rule.when.aggregates, ctx, cols.tp, cols.starts)
        if name == "class":
            return [workload_class(w) for w in cols.workloads]
        return [_fmt(x, 2) for x in (cols.gpu_hours if name == "gpu_hours" else cols.cost)]

    if not names:
        return [template] * n
    if len(names) == 1:
        return [fmt.format(x) for x in column(names[0])]
    return list(itertools.starmap(fmt.format, zip(*(column(name) for name in names), strict=True)))


def analyse(rules: Sequence[CompiledRule], inp: AnalysisInput) -> AnalysisResult:
    """Evaluate every rule over every held GPU at ``inp.now``."""
    # Thousands of findings are allocated and all survive: a full cyclic collection in
    # the middle would scan every live object for nothing (the tick makes no cycles).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _analyse(rules, inp)
    finally:
        if enabled:
            gc.enable()


def _view_calls(
    rules: Sequence[CompiledRule], view: WindowView
) -> list[tuple[str, Metric, tuple[float, ...]]]:
    """Every view aggregate the rules will read: their expressions, coverage gates, the
    utilisation and memory their messages quote, and each metric's newest sample."""
    aggs: dict[Aggregate, None] = {}
    for rule in rules:
        if not rule.spec.enabled:
            continue
        aggs.update(dict.fromkeys(rule.when.aggregates))
        if rule.waste is not None:
            aggs.update(dict.fromkeys(rule.waste.aggregates))
        if rule.window_s > 0:
            aggs.update(
                dict.fromkeys(Aggregate("coverage", m, (rule.window_s,)) for m in sorted(rule.metrics))
            )
            if "util" in rule.message_fields:
                aggs[Aggregate("mean", Metric.GPU_UTIL, (rule.window_s,))] = None
    aggs.update(dict.fromkeys(Aggregate("last", m) for m in view.metrics))
    return [(a.view_call[0], a.metric, a.view_call[1]) for a in aggs]


def _analyse(rules: Sequence[CompiledRule], inp: AnalysisInput) -> AnalysisResult:
    inp.view.prefetch(_view_calls(rules, inp.view), workers=min(4, os.cpu_count() or 1))
    h = _Holdings(inp)
    ctx = EvalContext(inp.view, h.gpu_index, h.group, h.group_size, h.attributes())
    age = inp.view.age_s()
    fresh = np.zeros(len(h.uuids), dtype=np.bool_)
    known = h.gpu_index >= 0
    fresh[known] = age[h.gpu_index[known]] <= inp.stale_after_s
    stale = frozenset(h.uuids[i] for i in np.flatnonzero(~fresh).tolist())
    unknown = h.ids(np.flatnonzero(~h.group_all(fresh)))
    findings: list[Finding] = []
    unjudged: dict[str, BoolArray] = {}
    for rule in rules:
        if rule.spec.enabled:
            trip, all_judged = _trips(rule, ctx, h, fresh)
            findings.extend(_findings(rule, ctx, h, trip))
            unjudged[rule.name] = ~all_judged
    findings.sort(key=lambda f: (f.rule, f.workload_id or "", f.gpu_uuids))
    return AnalysisResult(
        tuple(findings), stale_gpus=stale, unknown_workloads=unknown, unjudged=_PerRule(unjudged, h)
    )
