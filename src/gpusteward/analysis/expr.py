"""Rule conditions: a small, safe expression language compiled to numpy closures.

    mean(gpu_util_pct, 30m) < 5 and last(mem_used_mib) > 1024

Parsing goes through ``ast.parse(mode="eval")`` and a whitelist walk; nothing is ever
evaluated by Python. Every value is an array over *holdings* (one element per GPU of
each workload), so a rule runs over the whole cluster in a few numpy calls.

Booleans are three-valued (false / unknown / true, stored as int8 0 / 1 / 2): a
comparison with a missing value is unknown, ``not unknown`` stays unknown, and only a
known true trips a rule. Missing data never trips a rule, even under ``not``.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.aggregates import (
    AGGREGATES,
    INPUTS,
    METRIC_NAMES,
    MINUTE_AGGREGATES,
    Aggregate,
    EvalContext,
    FloatArray,
    format_duration,
    rewrite_durations,
)
from gpusteward.analysis.inputs import parse_input
from gpusteward.domain.errors import RuleError
from gpusteward.domain.models import Metric

Tri = npt.NDArray[np.int8]
Kind = Literal["num", "bool"]
Scope = Literal["gpu", "workload"]
Value = Any  # a float/int8 array over holdings, or a scalar before broadcasting

FALSE, UNKNOWN, TRUE = np.int8(0), np.int8(1), np.int8(2)

# The aggregates moved to their own module; rule authors' tools still import them from here.
__all__ = [
    "AGGREGATES",
    "GPU_ATTRIBUTES",
    "GROUP_FUNCTIONS",
    "METRIC_NAMES",
    "WORKLOAD_ATTRIBUTES",
    "Aggregate",
    "EvalContext",
    "Expr",
    "FloatArray",
    "Scope",
    "compile_expr",
    "format_duration",
]

#: Functions over the GPUs of one workload; only in ``scope: workload`` rules.
GROUP_FUNCTIONS = ("share", "count")
GPU_ATTRIBUTES = ("memory_total_mib", "price_per_hour")
WORKLOAD_ATTRIBUTES = ("gpus_requested", "gpus_held", "age_minutes")

MAX_LENGTH = 2000
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_ARITH: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _tri(mask: Any, known: Any) -> Tri:
    """2 where known and true, 0 where known and false, 1 where unknown."""
    known = np.asarray(known)
    out: Tri = (np.asarray(mask) & known).astype(np.int8)
    out *= 2
    out += ~known
    return out


@dataclass
class _Node:
    kind: Kind
    fn: Callable[[EvalContext], Value]
    const: float | None = None  # set when the node is a constant number (folded)
    agg: Aggregate | None = None  # set when the node is a bare aggregate call


@dataclass(frozen=True)
class Expr:
    """A compiled expression. ``evaluate_*`` return one value per holding of ``ctx``."""

    source: str
    kind: Kind
    aggregates: tuple[Aggregate, ...]
    #: The longest duration the expression looks back over (seconds), 0 if none.
    window_s: float
    uses_group: bool
    _fn: Callable[[EvalContext], Value] = field(repr=False, compare=False)

    @property
    def metrics(self) -> frozenset[Metric]:
        return frozenset(a.metric for a in self.aggregates)

    def evaluate_bool(self, ctx: EvalContext) -> npt.NDArray[np.bool_]:
        """True where the condition is known to hold (unknown counts as false)."""
        assert self.kind == "bool"
        out: npt.NDArray[np.bool_] = np.broadcast_to(np.asarray(self._fn(ctx)) == TRUE, (ctx.size,))
        return out

    def never(self, ctx: EvalContext) -> bool:
        """Whether no holding can hold, seen without per-holding work: each aggregate read is one
        number for all (``EvalContext.constant``), so is the answer, and it is not true."""
        fixed = all(ctx.constant(a) is not None for a in self.aggregates)
        return fixed and bool((out := np.asarray(self._fn(ctx))).ndim == 0 and out != TRUE)

    def evaluate_num(self, ctx: EvalContext) -> FloatArray:
        assert self.kind == "num"
        val = np.asarray(self._fn(ctx), dtype=np.float64)
        out: FloatArray = np.broadcast_to(val, (ctx.size,))
        return out


class _Compiler:
    def __init__(self, original: str, spans: list[tuple[int, int, int, int]], scope: Scope):
        self.original = original
        self.spans = spans  # (orig_start, orig_end, new_start, new_end) of each duration literal
        self.scope = scope
        self.aggs: dict[Aggregate, None] = {}
        self.window_s = 0.0
        self.in_group = self.uses_group = False

    # --- errors point at the author's text, not at our rewritten one ------------------

    def _orig(self, pos: int) -> int:
        delta = 0
        for o0, o1, n0, n1 in self.spans:
            if pos < n0:
                break
            if pos < n1:  # inside a rewritten literal: snap to its start or end
                return o0 if pos == n0 else o1
            delta = o1 - n1
        return pos + delta

    def piece(self, node: ast.AST) -> str:
        start, end = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if start is None or end is None:
            return ast.dump(node)
        return self.original[self._orig(start) : self._orig(end)]

    def fail(self, node: ast.AST, problem: str) -> RuleError:
        return RuleError(f"{problem}: '{self.piece(node)}'")

    def is_duration(self, node: ast.AST) -> bool:
        return any(getattr(node, "col_offset", -1) == n0 for _, _, n0, _ in self.spans)

    # --- the walk ---------------------------------------------------------------------

    def visit(self, node: ast.AST) -> _Node:
        if isinstance(node, ast.BoolOp):
            return self.boolop(node)
        if isinstance(node, ast.UnaryOp):
            return self.unary(node)
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.BinOp):
            return self.binop(node)
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise self.fail(node, "only numbers are allowed as constants")
            try:
                c = float(v)
            except OverflowError:  # an integer of hundreds of digits
                raise self.fail(node, "numbers must be finite") from None
            if not math.isfinite(c):  # 1e999 is inf: `util < 1e999` would flag every GPU
                raise self.fail(node, "numbers must be finite")
            return _Node("num", lambda ctx: c, const=c)
        if isinstance(node, ast.Name):
            return self.name(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        what = {
            ast.Attribute: "attribute access",
            ast.Subscript: "subscripts",
            ast.Lambda: "lambdas",
            ast.IfExp: "conditional expressions",
        }.get(type(node), type(node).__name__)
        raise self.fail(node, f"{what} not allowed in a rule expression")

    def want(self, node: ast.AST, compiled: _Node, kind: Kind) -> _Node:
        if compiled.kind != kind:
            expected = "a condition (true/false)" if kind == "bool" else "a number"
            raise self.fail(node, f"expected {expected}")
        return compiled

    def boolop(self, node: ast.BoolOp) -> _Node:
        parts = [self.want(v, self.visit(v), "bool").fn for v in node.values]
        # Kleene logic on 0/1/2: and = min, or = max.
        combine = np.minimum if isinstance(node.op, ast.And) else np.maximum

        def fn(ctx: EvalContext) -> Value:
            out = parts[0](ctx)
            for p in parts[1:]:
                out = combine(out, p(ctx))
            return out

        return _Node("bool", fn)

    def unary(self, node: ast.UnaryOp) -> _Node:
        inner = self.visit(node.operand)
        if isinstance(node.op, ast.Not):
            f = self.want(node.operand, inner, "bool").fn
            return _Node("bool", lambda ctx: TRUE - f(ctx))
        if isinstance(node.op, ast.USub | ast.UAdd):
            self.want(node.operand, inner, "num")
            sign = -1.0 if isinstance(node.op, ast.USub) else 1.0
            if inner.const is not None:
                c = sign * inner.const
                return _Node("num", lambda ctx: c, const=c)
            g = inner.fn
            return _Node("num", lambda ctx: sign * g(ctx))
        raise self.fail(node, "operator not allowed in a rule expression")

    def binop(self, node: ast.BinOp) -> _Node:
        op = _ARITH.get(type(node.op))
        if op is None:
            raise self.fail(node, "operator not allowed in a rule expression (use + - * /)")
        left = self.want(node.left, self.visit(node.left), "num")
        right = self.want(node.right, self.visit(node.right), "num")
        if left.const is not None and right.const is not None:
            try:
                c = float(op(left.const, right.const))
            except ZeroDivisionError:
                raise self.fail(node, "division by zero") from None
            if not math.isfinite(c):  # 1e308 * 10
                raise self.fail(node, "numbers must be finite")
            return _Node("num", lambda ctx: c, const=c)
        lf, rf = left.fn, right.fn

        def fn(ctx: EvalContext) -> Value:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                return op(np.asarray(lf(ctx), dtype=np.float64), rf(ctx))

        return _Node("num", fn)

    def compare(self, node: ast.Compare) -> _Node:
        if any(type(op) not in _COMPARE for op in node.ops):
            raise self.fail(node, "only < <= > >= == != comparisons are allowed")
        operands = [node.left, *node.comparators]
        compiled = [self.want(o, self.visit(o), "num") for o in operands]
        pairs: list[tuple[Callable[[Any, Any], Any], _Node, _Node]] = []
        for i, op_node in enumerate(node.ops):
            op = _COMPARE[type(op_node)]
            a, b = compiled[i], compiled[i + 1]
            self.below_for_window(operands[i], a, op_node, operands[i + 1], b)
            pairs.append((op, a, b))

        def fn(ctx: EvalContext) -> Value:
            out: Value = TRUE
            for op, a, b in pairs:
                x = np.asarray(a.fn(ctx), dtype=np.float64)
                y = np.asarray(b.fn(ctx), dtype=np.float64)
                with np.errstate(invalid="ignore"):
                    out = np.minimum(out, _tri(op(x, y), ~(np.isnan(x) | np.isnan(y))))
            return out

        return _Node("bool", fn)

    def below_for_window(self, ln: ast.AST, a: _Node, op: ast.cmpop, rn: ast.AST, b: _Node) -> None:
        """``below_for(m, x) >= 30`` looks back 30 minutes: that is the rule's window."""
        for agg, other_node, other, ops in ((a, rn, b, (ast.Gt, ast.GtE)), (b, ln, a, (ast.Lt, ast.LtE))):
            if agg.agg is None or agg.agg.func not in MINUTE_AGGREGATES or other.const is None:
                continue
            if self.is_duration(other_node):
                raise self.fail(other_node, f"{agg.agg.func}() is in minutes: compare it with a plain number")
            if isinstance(op, ops):
                self.window_s = max(self.window_s, other.const * 60.0)

    def name(self, node: ast.Name) -> _Node:
        n = node.id
        if n in METRIC_NAMES:
            raise self.fail(
                node, f"a metric can only be the first argument of an aggregate, e.g. mean({n}, 30m)"
            )
        if n in GPU_ATTRIBUTES or n in WORKLOAD_ATTRIBUTES:
            return _Node("num", lambda ctx: ctx.attribute(n))
        known = ", ".join((*GPU_ATTRIBUTES, *WORKLOAD_ATTRIBUTES))
        raise self.fail(node, f"unknown name (known: {known}, and metrics inside aggregates)")

    def const_arg(self, node: ast.AST, what: str) -> float:
        compiled = self.visit(node)
        if compiled.kind != "num" or compiled.const is None or not math.isfinite(compiled.const):
            raise self.fail(node, f"{what} must be a constant number")
        return compiled.const

    def call(self, node: ast.Call) -> _Node:
        if not isinstance(node.func, ast.Name):
            raise self.fail(node.func, "only plain function calls are allowed")
        fname = node.func.id
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail(node, "only positional arguments are allowed")
        if fname in GROUP_FUNCTIONS:
            return self.group_call(node, fname)
        if fname in INPUTS:  # evidence beyond one GPU's window (analysis/inputs.py)
            agg = parse_input(self, node, fname)
            self.aggs.setdefault(agg)
            self.window_s = max(self.window_s, agg.duration_s)
            return _Node("num", lambda ctx: ctx.aggregate(agg), agg=agg)
        roles = AGGREGATES.get(fname)
        if roles is None:
            known = ", ".join((*AGGREGATES, *INPUTS, *GROUP_FUNCTIONS))
            raise self.fail(node.func, f"unknown function (known: {known})")
        if len(node.args) != len(roles):
            raise self.fail(node, f"{fname}() takes {len(roles)} argument(s): {', '.join(roles)}")
        first = node.args[0]
        if not isinstance(first, ast.Name) or first.id not in METRIC_NAMES:
            names = ", ".join(METRIC_NAMES)
            raise self.fail(first, f"the first argument of {fname}() must be a metric ({names})")
        args: list[float] = []
        for role, arg in zip(roles[1:], node.args[1:], strict=True):
            v = self.const_arg(arg, f"the {role} of {fname}()")
            if role == "duration" and v <= 0:
                raise self.fail(arg, "a duration must be positive")
            args.append(v)
        agg = Aggregate(fname, METRIC_NAMES[first.id], tuple(args))
        self.aggs.setdefault(agg)
        self.window_s = max(self.window_s, agg.duration_s)
        return _Node("num", lambda ctx: ctx.value(agg), agg=agg)

    def group_call(self, node: ast.Call, fname: str) -> _Node:
        if self.scope != "workload":
            raise self.fail(node, f"{fname}() is only allowed in rules with scope: workload")
        if self.in_group:
            raise self.fail(node, f"{fname}() cannot be nested")
        if len(node.args) != 1:
            raise self.fail(node, f"{fname}() takes one condition")
        self.in_group = True
        try:
            cond = self.want(node.args[0], self.visit(node.args[0]), "bool").fn
        finally:
            self.in_group = False
        self.uses_group = True
        share = fname == "share"

        def fn(ctx: EvalContext) -> Value:
            hits = np.broadcast_to(np.asarray(cond(ctx)) == TRUE, (ctx.size,)).astype(np.float64)
            counts = ctx.per_group(hits)
            if not share:
                return counts
            # Over every GPU the workload holds: one the store never saw is not a hit.
            return counts / np.maximum(ctx.group_size[ctx.group], 1.0)

        return _Node("num", fn)


def compile_expr(source: str, *, scope: Scope = "gpu", kind: Kind = "bool") -> Expr:
    """Compile a rule expression; any problem is a ``RuleError`` naming the bad piece."""
    text = " ".join(source.split())  # YAML block scalars may span lines; eval mode may not
    if not text:
        raise RuleError("empty expression")
    if len(text) > MAX_LENGTH:
        raise RuleError(f"expression longer than {MAX_LENGTH} characters")
    if not text.isascii():
        raise RuleError("expression must be plain ASCII")
    rewritten, spans = rewrite_durations(text)
    try:
        tree = ast.parse(rewritten, mode="eval")
    except SyntaxError as e:
        col = f" at column {e.offset}" if e.offset else ""
        raise RuleError(f"syntax error{col}: {e.msg}: '{text}'") from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise RuleError(f"expression too complex or invalid: {e}") from None
    compiler = _Compiler(text, spans, scope)
    try:
        root = compiler.want(tree.body, compiler.visit(tree.body), kind)
    except RecursionError:
        raise RuleError("expression nested too deeply") from None
    return Expr(
        source=text,
        kind=kind,
        aggregates=tuple(compiler.aggs),
        window_s=compiler.window_s,
        uses_group=compiler.uses_group,
        _fn=root.fn,
    )
