"""Evidence beyond one GPU's window, as ordinary inputs of the engine (``aggregates.INPUTS``).

* ``fleet_idle_share([class,] d)``: of the class's held GPUs with data, the share at under
  1 % for all of the last ``d`` (``0``: at the newest sample). The holder's own class unless
  one is named. Computed once per tick over every holding (two ``bincount``s).
* ``p_busy_again(H)``, ``p_busy_again_upper(H)``, ``idle_gaps(H)``: from the runtime's
  idle-gap record of the holder (analysis/idle_gaps.py), NaN when the runtime keeps none for
  that horizon or the workload is not in an idle spell: unknown, which never trips a rule.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.aggregates import IDLE_PCT, Aggregate, EvalContext, FloatArray
from gpusteward.analysis.idle_gaps import GapOdds
from gpusteward.domain.classes import CLASSES, workload_class
from gpusteward.domain.errors import RuleError
from gpusteward.domain.models import Metric, Workload

IntArray = npt.NDArray[np.intp]
GAP_FUNCS = ("p_busy_again", "p_busy_again_upper", "idle_gaps")


class GapHistory(Protocol):
    """The runtime's idle-gap record (runtime/gap_history.py), per horizon."""

    def odds(self, horizon_s: float, ids: Sequence[str], classes: IntArray, now: datetime) -> GapOdds | None:
        """Per workload of ``ids``; None when no record is kept for ``horizon_s``."""
        ...


class _Compiler(Protocol):
    def fail(self, node: ast.AST, problem: str) -> RuleError: ...
    def const_arg(self, node: ast.AST, what: str) -> float: ...


def parse_input(c: _Compiler, node: ast.Call, fname: str) -> Aggregate:
    """The ``Aggregate`` for a call of an input function, checked."""
    args = list(node.args)
    if fname == "fleet_idle_share":
        cls = -1.0
        if len(args) == 2:
            first = args.pop(0)
            if not isinstance(first, ast.Name) or first.id not in CLASSES:
                raise c.fail(first, f"the class of fleet_idle_share() must be one of {', '.join(CLASSES)}")
            cls = float(CLASSES.index(first.id))
        if len(args) != 1:
            raise c.fail(node, "fleet_idle_share() takes an optional class and a duration (0: now)")
        d = c.const_arg(args[0], "the duration of fleet_idle_share()")
        if d < 0:
            raise c.fail(args[0], "a duration must not be negative")
        return Aggregate(fname, Metric.GPU_UTIL, (cls, d))
    if len(args) != 1:
        raise c.fail(node, f"{fname}() takes one horizon, e.g. {fname}(6h)")
    h = c.const_arg(args[0], f"the horizon of {fname}()")
    if h <= 0:
        raise c.fail(args[0], "a horizon must be positive")
    return Aggregate(fname, Metric.GPU_UTIL, (h,))


def fleet_idle_share(agg: Aggregate, ctx: EvalContext, classes: IntArray) -> FloatArray:
    cls, d = agg.args
    util = ctx.aggregate(
        Aggregate("max", Metric.GPU_UTIL, (d,)) if d > 0 else Aggregate("last", Metric.GPU_UTIL)
    )
    known = ~np.isnan(util)
    with np.errstate(invalid="ignore"):
        idle = known & (util < IDLE_PCT)
    n = len(CLASSES)
    idle_c = np.bincount(classes, weights=idle, minlength=n)
    known_c = np.bincount(classes, weights=known, minlength=n)
    share: FloatArray = np.where(known_c > 0, idle_c / np.maximum(known_c, 1.0), np.nan)
    out: FloatArray = share[classes] if cls < 0 else np.full(ctx.size, share[int(cls)])
    return out


def make_inputs(
    workloads: Sequence[Workload],
    group: IntArray,
    classes: Callable[[], IntArray],
    history: GapHistory | None,
    now: datetime,
) -> Callable[[Aggregate, EvalContext], FloatArray]:
    """The engine's hook: ``group`` maps holdings to ``workloads``; ``classes()`` gives each
    holding's class index."""
    per_horizon: dict[float, GapOdds | None] = {}

    def compute(agg: Aggregate, ctx: EvalContext) -> FloatArray:
        if agg.func == "fleet_idle_share":
            return fleet_idle_share(agg, ctx, classes())
        h = agg.args[0]
        if h not in per_horizon:
            ids = [w.id for w in workloads]
            codes = {c: i for i, c in enumerate(CLASSES)}
            per_w = np.fromiter((codes[workload_class(w)] for w in workloads), np.intp, len(ids))
            per_horizon[h] = None if history is None else history.odds(h, ids, per_w, now)
        odds = per_horizon[h]
        if odds is None:
            return np.full(ctx.size, np.nan)
        field = {"p_busy_again": odds.p, "p_busy_again_upper": odds.upper, "idle_gaps": odds.gaps}[agg.func]
        out: FloatArray = field[group]
        return out

    return compute


def gap_horizons(aggregates: Sequence[Aggregate]) -> set[float]:
    """The horizons the runtime must keep a record for."""
    return {a.args[0] for a in aggregates if a.func in GAP_FUNCS}
