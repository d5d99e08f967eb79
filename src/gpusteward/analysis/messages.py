"""A rule's message for each finding: ``{gpu} {evidence} ...`` filled in column by column.

Only the placeholders a template uses are computed, each once for all findings of the rule.
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.aggregates import Aggregate, EvalContext, format_duration
from gpusteward.analysis.evidence import XID_LOOKBACK_S, evidence_texts, xid_texts
from gpusteward.analysis.gpu_names import NAMES
from gpusteward.analysis.rules import CompiledRule
from gpusteward.domain.classes import workload_class
from gpusteward.domain.models import Gpu, Metric, Workload

_T = TypeVar("_T")
_R = TypeVar("_R")


def fmt_value(v: float, digits: int = 0) -> str:
    if not math.isfinite(v):
        return "?"
    return str(round(v)) if digits == 0 else f"{v:.2f}" if digits == 2 else f"{v:.1f}"


def _chunks(items: list[_T], counts: list[int], make: Callable[[Iterator[_T]], _R]) -> list[_R]:
    """``make`` over consecutive runs of ``counts[i]`` items each."""
    it = iter(items)
    return [make(itertools.islice(it, k)) for k in counts]


@dataclass
class Columns:
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
    fleet: int  # how many GPUs the tick knows (bounds the GPU names kept between ticks)


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
        return [fmt_value(v, digits) for v in values]
    memo = {v: fmt_value(v) for v in set(values)}
    return list(map(memo.__getitem__, values))


def messages(rule: CompiledRule, ctx: EvalContext, known: list[Gpu | None], cols: Columns) -> list[str]:
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
            return _chunks(NAMES.of(cols.uuids, known, cols.fleet), cols.counts, ", ".join)
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
            # The present readings' sum per finding: float32 readings add up exactly in float64,
            # in any order, so reduceat gives Python's sum; each distinct total formatted once.
            mem = ctx.aggregate(Aggregate("last", Metric.MEM_USED))[cols.tp]
            seen = ~np.isnan(mem)
            gib = (np.add.reduceat(np.where(seen, mem, 0.0), cols.starts) / 1024.0).tolist()
            texts = {v: fmt_value(v, 1) for v in set(gib)}
            have = np.logical_or.reduceat(seen, cols.starts).tolist()
            return [texts[v] if k else "?" for v, k in zip(gib, have, strict=True)]
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
            classes = [workload_class(w) for w in cols.workloads]
            return evidence_texts(rule.when.aggregates, ctx, cols.tp, cols.starts, classes)
        if name == "class":
            return [workload_class(w) for w in cols.workloads]
        if name == "xid":
            return xid_texts(ctx, cols.tp, cols.starts, max(rule.window_s, XID_LOOKBACK_S))
        return [fmt_value(x, 2) for x in (cols.gpu_hours if name == "gpu_hours" else cols.cost)]

    if not names:
        return [template] * n
    if len(names) == 1:
        return [fmt.format(x) for x in column(names[0])]
    return list(itertools.starmap(fmt.format, zip(*(column(name) for name in names), strict=True)))
