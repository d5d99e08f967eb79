"""One analysis tick: window view + compiled rules + GPUs + workloads + now -> findings.

Pure: no I/O and no clock. Rules see *holdings*, one element per GPU of each workload,
so only held GPUs are judged and a GPU shared by two workloads is judged for each. Repair
rules (GPU health) judge every GPU instead, held or free: one finding per GPU and holder,
``workload_id`` None for a free GPU; coverage never gates them (a missing reading is unknown).

Safety, in order: a GPU without a fresh sample (``stale_after_s``) or without enough
data over a rule's window (``min_coverage``) is never part of that rule's finding; a
gpu-scope reclaim rule with ``require_all_gpus`` reports a workload only when every
GPU it holds trips (a job busy on some GPUs is never stopped; ``overprovisioned``
advises instead); a workload-scope rule needs every GPU of the workload judged.
"""

from __future__ import annotations

import gc
import itertools
import operator
import os
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.aggregates import Aggregate, EvalContext
from gpusteward.analysis.holdings import Holdings, PerRule
from gpusteward.analysis.inputs import GapHistory, make_inputs
from gpusteward.analysis.messages import Columns, messages
from gpusteward.analysis.rules import CompiledRule
from gpusteward.domain.models import (
    HEALTH_METRICS,
    Finding,
    Gpu,
    Metric,
    RuleAction,
    Workload,
)
from gpusteward.store.window import WindowView

BoolArray = npt.NDArray[np.bool_]
#: Evidence only some sources have: it never gates judging. A rule reads it as
#: ``coverage(requests_per_s, 30m) == 0 or max(requests_per_s, 30m) == 0``.
OPTIONAL_METRICS = frozenset({Metric.REQUESTS})
#: Metrics whose coverage never gates judging: the optional ones and GPU health readings.
UNGATED_METRICS = OPTIONAL_METRICS | HEALTH_METRICS


@dataclass(frozen=True)
class AnalysisInput:
    view: WindowView
    gpus: Mapping[str, Gpu]
    workloads: Sequence[Workload]
    now: datetime
    stale_after_s: float = 120.0
    #: The idle-gap record behind ``p_busy_again(H)`` (the runtime keeps it beyond the window).
    history: GapHistory | None = None


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


def _judged(rule: CompiledRule, ctx: EvalContext, fresh: BoolArray) -> BoolArray:
    """Holdings with fresh data covering enough of the rule's window for every metric it reads."""
    ok = fresh.copy()
    if rule.window_s > 0 and rule.action is not RuleAction.REPAIR:
        for m in sorted(rule.metrics - UNGATED_METRICS):
            cov = ctx.aggregate(Aggregate("coverage", m, (rule.window_s,)))
            with np.errstate(invalid="ignore"):
                ok &= cov >= rule.spec.min_coverage - 1e-9
    return ok


def _trips(
    rule: CompiledRule, ctx: EvalContext, h: Holdings, fresh: BoolArray
) -> tuple[BoolArray, BoolArray]:
    """Which holdings trip the rule, and which workloads it judged on every GPU."""
    judged = _judged(rule, ctx, fresh)
    all_judged = h.group_all(judged)
    if not judged.any():  # e.g. a window longer than the store keeps: nothing can trip
        return judged, all_judged
    if rule.spec.classes:
        judged = judged & h.in_classes(rule.spec.classes)
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


def _findings(rule: CompiledRule, ctx: EvalContext, h: Holdings, trip: BoolArray) -> list[Finding]:
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
    if any(map(operator.is_, known, itertools.repeat(None))):  # ``None in`` calls Gpu.__eq__
        prices = np.fromiter((0.0 if g is None else g.price_per_hour for g in known), np.float64, len(known))
    else:
        prices = np.fromiter(map(_PRICE, known), np.float64, len(known))
    counts = sizes.tolist()
    workloads = list(map(h.workloads.__getitem__, groups[starts].tolist()))
    held = h.group_size[groups[starts]].astype(int).tolist()
    # A workload tripping on every GPU it holds (all of a reclaim rule's findings) lists
    # exactly its own tuple: share it rather than build an equal one.
    bl = bounds.tolist()
    whole = h.whole_workloads
    gpu_uuids = [
        w.gpu_uuids if whole and k == n_held else tuple(uuids[lo:hi])
        for w, k, n_held, lo, hi in zip(workloads, counts, held, bl[:-1], bl[1:], strict=True)
    ]
    cols = Columns(
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
        fleet=len(h.gpus),
    )
    # Each finding's evidence: aggregate text -> {uuid: value}, built by C loops (map) where no
    # value is missing. ``zip(gpu_uuids, values)`` stops at the end of the finding's GPUs
    # without drawing from the shared iterator.
    per_aggregate: list[list[dict[str, float]]] = []
    for agg in rule.when.aggregates:
        vals = ctx.aggregate(agg)[tp]
        it = iter(vals.tolist())
        if np.isnan(vals).any():  # a missing value is left out rather than reported as NaN
            per_aggregate.append(
                [{u: v for u, v in zip(gu, it, strict=False) if v == v} for gu in cols.gpu_uuids]
            )
        else:
            per_aggregate.append(list(map(dict, map(zip, cols.gpu_uuids, itertools.repeat(it)))))
    texts = tuple(agg.text for agg in rule.when.aggregates)
    n = len(counts)
    evidence: list[dict[str, dict[str, float]]]
    if texts:
        evidence = list(map(dict, map(zip, itertools.repeat(texts), zip(*per_aggregate, strict=True))))
    else:
        evidence = [{} for _ in range(n)]
    msgs = messages(rule, ctx, known, cols)
    return _findings_of(
        n,
        (
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
            msgs,
        ),
    )


_PRICE = operator.attrgetter("price_per_hour")
#: Each field's slot setter, in Finding's field order.
_FINDING_SETTERS = tuple(getattr(Finding, f.name).__set__ for f in fields(Finding))


def _findings_of(n: int, columns: Sequence[Iterable[Any]]) -> list[Finding]:
    """``n`` findings from one column per field, in field order: ``map(Finding, *columns)``'s
    answer in half the time. A frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, a call per field and finding; the slots' own setters, mapped
    column by column, make that a C loop per field. The findings stay frozen."""
    out = [object.__new__(Finding) for _ in range(n)]
    for set_field, column in zip(_FINDING_SETTERS, columns, strict=True):
        deque(map(set_field, out, column), maxlen=0)
    return out


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
                dict.fromkeys(
                    Aggregate("coverage", m, (rule.window_s,)) for m in sorted(rule.metrics - UNGATED_METRICS)
                )
            )
            if "util" in rule.message_fields:
                aggs[Aggregate("mean", Metric.GPU_UTIL, (rule.window_s,))] = None
    aggs.update(dict.fromkeys(Aggregate("last", m) for m in view.metrics))
    calls = [(a.view_call, a.metric) for a in aggs if a.metric in view.metrics]
    return [(c[0], m, c[1]) for c, m in calls if c is not None]


def _context(inp: AnalysisInput, h: Holdings) -> tuple[EvalContext, BoolArray]:
    hook = make_inputs(h.workloads, h.group, h.class_codes, inp.history, inp.now)
    ctx = EvalContext(inp.view, h.gpu_index, h.group, h.group_size, h.attributes(), hook)
    age = inp.view.age_s()
    fresh = np.zeros(len(h.uuids), dtype=np.bool_)
    known = h.gpu_index >= 0
    fresh[known] = age[h.gpu_index[known]] <= inp.stale_after_s
    return ctx, fresh


def _repair(
    rules: Sequence[CompiledRule], inp: AnalysisInput, held: Holdings, held_ctx: EvalContext
) -> list[Finding]:
    """Repair rules judge every GPU once per holder, free ones once with a holder of id
    ``""`` (reported as None): a failed GPU matters whether or not anyone holds it."""
    # A condition over metrics the store has no data for (a source without health readings)
    # is one answer for every GPU: where that is not true, the per-GPU holdings are not built.
    # A holding of a GPU the store never saw is never fresh, so it cannot trip either way.
    rules = [r for r in rules if not r.when.never(held_ctx)]
    if not rules:
        return []
    h = held.per_gpu(inp.view)
    ctx, fresh = _context(inp, h)
    out: list[Finding] = []
    for rule in rules:
        trip, _ = _trips(rule, ctx, h, fresh)
        out.extend(
            f if f.workload_id else replace(f, workload_id=None) for f in _findings(rule, ctx, h, trip)
        )
    return out


def _analyse(rules: Sequence[CompiledRule], inp: AnalysisInput) -> AnalysisResult:
    inp.view.prefetch(_view_calls(rules, inp.view), workers=min(4, os.cpu_count() or 1))
    h = Holdings(inp.view, inp.gpus, inp.workloads, inp.now)
    ctx, fresh = _context(inp, h)
    stale = frozenset(h.uuids[i] for i in np.flatnonzero(~fresh).tolist())
    unknown = h.ids(np.flatnonzero(~h.group_all(fresh)))
    enabled = [r for r in rules if r.spec.enabled]
    by_rule: dict[str, list[Finding]] = {}
    for f in _repair([r for r in enabled if r.action is RuleAction.REPAIR], inp, h, ctx):
        by_rule.setdefault(f.rule, []).append(f)
    unjudged: dict[str, BoolArray] = {}
    for rule in enabled:
        if rule.action is RuleAction.REPAIR:  # judged above, on every fresh GPU
            unjudged[rule.name] = ~h.group_all(fresh)
            continue
        trip, all_judged = _trips(rule, ctx, h, fresh)
        by_rule.setdefault(rule.name, []).extend(_findings(rule, ctx, h, trip))
        unjudged[rule.name] = ~all_judged
    # By rule, then workload id and GPUs: rule by rule, so a finding's key is not a tuple.
    findings = itertools.chain.from_iterable(_by_workload(by_rule[name]) for name in sorted(by_rule))
    return AnalysisResult(
        tuple(findings), stale_gpus=stale, unknown_workloads=unknown, unjudged=PerRule(unjudged, h)
    )


_WORKLOAD_ID = operator.attrgetter("workload_id")


def _by_workload(findings: list[Finding]) -> list[Finding]:
    """One rule's findings ordered by workload id, then GPUs. Where every id is a distinct
    string (one finding per workload: all but the repair rules'), the id alone orders them,
    compared as plain strings: a tuple key per finding cost ~2 ms a tick at 100,000 GPUs."""
    ids = list(map(_WORKLOAD_ID, findings))
    if None not in ids and len(set(ids)) == len(ids):
        return list(map(findings.__getitem__, sorted(range(len(ids)), key=ids.__getitem__)))
    return sorted(findings, key=lambda f: (f.workload_id or "", f.gpu_uuids))
