"""Aggregates over the window: the evidence a rule reads, and what an expression sees.

``Aggregate`` is one call such as ``busy_share(gpu_util_pct, 1, 3.5h)``: a method of the
``WindowView`` (numpy over every GPU at once), its arguments and its units. ``EvalContext``
hands each holding (a GPU of a workload) its value, computed once per tick.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.trends import counter_increase
from gpusteward.domain.classes import CLASSES
from gpusteward.domain.models import Metric
from gpusteward.store.window import WindowView

FloatArray = npt.NDArray[np.float64]
_DURATION = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(s|m|h)\b")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}

#: Aggregates over the window and the role of each argument.
AGGREGATES: dict[str, tuple[str, ...]] = {
    "mean": ("metric", "duration"),
    "min": ("metric", "duration"),
    "max": ("metric", "duration"),
    "last": ("metric",),
    "coverage": ("metric", "duration"),
    "fraction_below": ("metric", "number", "duration"),
    "below_for": ("metric", "number"),
    # Evidence for services (issue 14): how busy over a long window, how long at exactly
    # zero, and how long the holder has been watched at all.
    "busy_share": ("metric", "number", "duration"),
    "zero_for": ("metric",),
    "watched_for": ("metric",),
    # Trend tests for GPU health (issue 16): a counter's increase over d (resets handled) and
    # the least-squares slope per hour over d.
    "increase": ("metric", "duration"),
    "slope": ("metric", "duration"),
}
#: Evidence beyond one GPU's window (analysis/inputs.py): the share of the class's GPUs idle
#: (the fleet's tide; ``fleet_idle_share(1h)`` for the holder's own class or
#: ``fleet_idle_share(service, 1h)``), and the holder's idle-gap history, which the runtime
#: keeps beyond the window: P(busy again within a horizon), its upper 95 % bound and the
#: gaps behind it. A horizon looks ahead, not back: it does not lengthen a rule's window.
INPUTS: dict[str, tuple[str, ...]] = {
    "fleet_idle_share": ("class", "duration"),
    "p_busy_again": ("horizon",),
    "p_busy_again_upper": ("horizon",),
    "idle_gaps": ("horizon",),
}
#: Below this a GPU is idle for the fleet's tide, and a sample is not busy for the gaps.
IDLE_PCT = 1.0
#: Aggregates in minutes (compared with plain numbers; ``f(m) >= N`` looks back N minutes).
MINUTE_AGGREGATES = ("below_for", "zero_for", "watched_for")
#: ``zero_for`` is ``below_for`` this small: any reading above zero ends the run.
ZERO_PCT = float(np.finfo(np.float32).tiny)
METRIC_NAMES = {m.value: m for m in Metric}


def format_duration(seconds: float) -> str:
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Aggregate:
    """One aggregate call, e.g. ``mean(gpu_util_pct, 30m)``; ``text`` is its canonical form."""

    func: str
    metric: Metric
    args: tuple[float, ...] = ()

    @property
    def text(self) -> str:
        if self.func in INPUTS:
            return f"{self.func}({', '.join(_input_args(self))})"
        parts = [self.metric.value]
        for role, v in zip(AGGREGATES[self.func][1:], self.args, strict=True):
            parts.append(format_duration(v) if role == "duration" else f"{v:g}")
        return f"{self.func}({', '.join(parts)})"

    @property
    def duration_s(self) -> float:
        if self.func in INPUTS:
            return self.args[-1] if self.func == "fleet_idle_share" else 0.0
        roles = AGGREGATES[self.func][1:]
        return max((v for r, v in zip(roles, self.args, strict=True) if r == "duration"), default=0.0)

    @property
    def view_call(self) -> tuple[str, tuple[float, ...]] | None:
        """The ``WindowView`` method and its arguments after the metric (None: not the view's)."""
        if self.func == "fleet_idle_share":
            return ("max", self.args[1:]) if self.args[1] > 0 else ("last", ())
        if self.func in INPUTS:
            return None
        if self.func == "busy_share":  # shares fraction_below's memoised counts
            return "fraction_below", self.args
        if self.func == "zero_for":
            return "below_for_s", (ZERO_PCT,)
        if self.func == "watched_for":
            return "watched_s", ()
        if self.func == "increase":  # not a view method: computed in analysis/trends.py
            return None
        return ("below_for_s" if self.func == "below_for" else self.func), self.args

    def compute(self, view: WindowView) -> FloatArray:
        """Per GPU of the view, in the view's index order."""
        if self.func == "increase":
            return counter_increase(view, self.metric, self.args[0])
        call = self.view_call
        assert call is not None, self.func  # INPUTS go through EvalContext's hook
        method, args = call
        out: FloatArray = getattr(view, method)(self.metric, *args)
        if self.func == "busy_share":
            return 1.0 - out  # NaN (no present sample) stays NaN
        if self.func == "slope":
            return out * 60.0  # the view's is per minute
        return out / 60.0 if self.func in MINUTE_AGGREGATES else out


def _input_args(agg: Aggregate) -> list[str]:
    if agg.func == "fleet_idle_share":
        cls, d = agg.args
        return ([] if cls < 0 else [CLASSES[int(cls)]]) + [format_duration(d) if d > 0 else "0"]
    return [format_duration(v) for v in agg.args]


class EvalContext:
    """What an expression sees: one element per holding (a GPU of a workload).

    ``gpu_index`` maps holdings to view indices (-1: the store has never seen that GPU,
    so all its aggregates are NaN); ``group`` maps holdings to workloads 0..n-1, and
    ``group_size`` is how many GPUs each workload holds. ``attributes`` are computed
    lazily, once, by name. ``inputs`` computes the evidence beyond one GPU's window
    (``INPUTS``); without it that evidence is unknown (NaN), which never trips a rule.
    """

    def __init__(
        self,
        view: WindowView,
        gpu_index: npt.NDArray[np.intp],
        group: npt.NDArray[np.intp],
        group_size: FloatArray,
        attributes: Mapping[str, Callable[[], FloatArray]],
        inputs: Callable[[Aggregate, EvalContext], FloatArray] | None = None,
    ) -> None:
        self.view = view
        self.gpu_index = gpu_index
        self.group = group
        self.group_size = group_size
        self.size = len(gpu_index)
        self._attributes = attributes
        self._inputs = inputs
        self._unknown = gpu_index < 0
        self._safe_index = np.where(self._unknown, 0, gpu_index)
        self._cache: dict[object, FloatArray] = {}
        self._constants: dict[Aggregate, np.float64 | None] = {}

    def aggregate(self, agg: Aggregate) -> FloatArray:
        hit = self._cache.get(agg)
        if hit is None:
            if agg.func in INPUTS:
                hit = np.full(self.size, np.nan) if self._inputs is None else self._inputs(agg, self)
            elif len(self.view) == 0 or agg.metric not in self.view.metrics:  # a store without it
                hit = np.full(self.size, np.nan)
            else:
                hit = agg.compute(self.view)[self._safe_index]
                hit[self._unknown] = np.nan
            self._cache[agg] = hit
        return hit

    def value(self, agg: Aggregate) -> FloatArray | np.float64:
        """What an expression reads: ``aggregate``, or one number where that is the same for every
        holding (a metric the store holds no data for, as the health readings of a source without
        them), so the expression works on that number rather than on an array of copies."""
        c = self.constant(agg)
        return self.aggregate(agg) if c is None else c

    def constant(self, agg: Aggregate) -> np.float64 | None:
        """The value every holding has for ``agg``, found without computing it per holding;
        None where it may differ."""
        if agg not in self._constants:
            self._constants[agg] = self._constant(agg)
        return self._constants[agg]

    def _constant(self, agg: Aggregate) -> np.float64 | None:
        if agg.func in INPUTS or self.size == 0:
            return None
        if len(self.view) == 0 or agg.metric not in self.view.metrics:
            return np.float64(np.nan)  # as ``aggregate`` has it
        if not self.view.blank(agg.metric):
            return None
        # No data: every GPU's answer is the same (NaN, or a coverage of 0); a holding whose GPU
        # the store never saw has NaN, so a number other than NaN is shared only without those.
        c = np.float64(agg.compute(self.view)[0])
        return c if np.isnan(c) or not self._unknown.any() else None

    def attribute(self, name: str) -> FloatArray:
        hit = self._cache.get(name)
        if hit is None:
            hit = np.asarray(self._attributes[name](), dtype=np.float64)
            self._cache[name] = hit
        return hit

    def per_group(self, values: FloatArray) -> FloatArray:
        """Sum ``values`` per workload and hand each holding its workload's total."""
        sums = np.bincount(self.group, weights=values, minlength=len(self.group_size))
        out: FloatArray = sums[self.group].astype(np.float64)
        return out


def rewrite_durations(text: str) -> tuple[str, list[tuple[int, int, int, int]]]:
    """``30m`` -> ``1800.0``, remembering where each literal was in both texts."""
    out: list[str] = []
    spans: list[tuple[int, int, int, int]] = []
    pos = 0
    new_len = 0
    for m in _DURATION.finditer(text):
        out.append(text[pos : m.start()])
        new_len += m.start() - pos
        seconds = repr(float(m.group(1)) * _UNIT_S[m.group(2)])
        spans.append((m.start(), m.end(), new_len, new_len + len(seconds)))
        out.append(seconds)
        new_len += len(seconds)
        pos = m.end()
    out.append(text[pos:])
    return "".join(out), spans
