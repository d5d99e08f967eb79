"""Rule expressions: what parses, what is refused, and three-valued evaluation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gpusteward.analysis.expr import EvalContext, Scope, compile_expr
from gpusteward.domain.errors import RuleError
from gpusteward.domain.models import Sample
from gpusteward.store.window import WindowStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("source", "aggregates", "window_s"),
    [
        (
            "mean(gpu_util_pct, 30m) < 5 and last(mem_used_mib) > 1024",
            ["mean(gpu_util_pct, 30m)", "last(mem_used_mib)"],
            1800,
        ),
        ("below_for(gpu_util_pct, 10) >= 30", ["below_for(gpu_util_pct, 10)"], 1800),
        ("30 < below_for(gpu_util_pct, 10)", ["below_for(gpu_util_pct, 10)"], 1800),
        ("below_for(gpu_util_pct, 10) < 30", ["below_for(gpu_util_pct, 10)"], 0),
        ("mean(gpu_util_pct, 1800) < 5", ["mean(gpu_util_pct, 30m)"], 1800),
        (
            "mean(gpu_util_pct, 0.5h) < 5 or max(power_w, 90s) > 300",
            ["mean(gpu_util_pct, 30m)", "max(power_w, 90s)"],
            1800,
        ),
        ("fraction_below(sm_active_pct, 5, 1h) >= 0.9", ["fraction_below(sm_active_pct, 5, 1h)"], 3600),
        (
            "coverage(temp_c, 2m) > 0.5 and min(temp_c, 2m) > 80",
            ["coverage(temp_c, 2m)", "min(temp_c, 2m)"],
            120,
        ),
        ("last(mem_used_mib) > 0.9 * memory_total_mib", ["last(mem_used_mib)"], 0),
        ("not (mean(gpu_util_pct, 10m) >= 5) and -1 < 0", ["mean(gpu_util_pct, 10m)"], 600),
        ("0 <= mean(pcie_rx_bytes_per_s, 5m) + mean(pcie_tx_bytes_per_s, 5m) < 1e6", None, 300),
        ("age_minutes > 60 and gpus_held < gpus_requested and price_per_hour > 1", [], 0),
        ("mean(gpu_util_pct, 1m) < 5 and mean(gpu_util_pct, 60s) < 5", ["mean(gpu_util_pct, 1m)"], 60),
        ("mean(gpu_util_pct,\n  30m) < 5", ["mean(gpu_util_pct, 30m)"], 1800),
    ],
)
def test_accepts(source: str, aggregates: list[str] | None, window_s: float) -> None:
    expr = compile_expr(source)
    if aggregates is not None:
        assert [a.text for a in expr.aggregates] == aggregates
    assert expr.window_s == window_s


@pytest.mark.parametrize(
    ("source", "scope", "problem"),
    [
        ("__import__('os')", "gpu", "unknown function"),
        ("open('/etc/passwd')", "gpu", "unknown function"),
        ("foo(gpu_util_pct, 1m) > 1", "gpu", "unknown function"),
        ("gpu_util_pct.__class__", "gpu", "attribute access"),
        ("mean(gpu_util_pct, 30m).real > 1", "gpu", "attribute access"),
        ("gpu_util_pct.__class__.__subclasses__()", "gpu", "only plain function calls"),
        ("(lambda: 1)() > 0", "gpu", "only plain function calls"),
        ("[1][0] > 0", "gpu", "not allowed"),
        ("mean(gpu_util_pct, 30m)[0] < 1", "gpu", "subscripts"),
        ("1 if mean(gpu_util_pct, 1m) < 5 else 0", "gpu", "conditional"),
        ("2 ** 10 > 1", "gpu", "operator not allowed"),
        ("mean(gpu_util_pct) < 1", "gpu", "takes 2 argument"),
        ("mean(gpu_util_pct, 30m, 1) < 1", "gpu", "takes 2 argument"),
        ("mean(power, 30m) < 1", "gpu", "must be a metric"),
        ("mean('gpu_util_pct', 30m) < 1", "gpu", "must be a metric"),
        ("gpu_util_pct < 5", "gpu", "first argument of an aggregate"),
        ("mean(gpu_util_pct, d=30) < 5", "gpu", "positional"),
        ("mean(*[gpu_util_pct]) < 5", "gpu", "positional"),
        ("mean(gpu_util_pct, memory_total_mib) < 5", "gpu", "constant number"),
        ("mean(gpu_util_pct, 0m) < 5", "gpu", "positive"),
        ("mean(gpu_util_pct, 30m) < fooo", "gpu", "unknown name"),
        ("'a' < 'b'", "gpu", "only numbers"),
        ("True", "gpu", "only numbers"),
        ("mean(gpu_util_pct, 30m)", "gpu", "expected a condition"),
        ("mean(gpu_util_pct, 30m) < 5 and 3", "gpu", "expected a condition"),
        ("not mean(gpu_util_pct, 30m)", "gpu", "expected a condition"),
        ("(1 < 2) + 1 > 0", "gpu", "expected a number"),
        ("mean(gpu_util_pct, 30m) in (1, 2)", "gpu", "comparisons"),
        ("share(mean(gpu_util_pct, 1h) < 5) > 0.5", "gpu", "scope: workload"),
        ("share(share(mean(gpu_util_pct, 1h) < 5) > 0.5) > 0", "workload", "nested"),
        ("count(1) > 0", "workload", "expected a condition"),
        ("below_for(gpu_util_pct, 10) >= 30m", "gpu", "in minutes"),
        ("1 / 0 > 1", "gpu", "division by zero"),
        ("mean(gpu_util_pct, 30m) <", "gpu", "syntax error"),
        ("x = 1", "gpu", "syntax error"),
        ("mean(gpu_util_pct, 30m) < 5; import os", "gpu", "syntax error"),
        ("mean(gpu_util_pct, 30m) < \uff15", "gpu", "ASCII"),
        ("   ", "gpu", "empty"),
        ("1 < " * 2000 + "1", "gpu", "longer than"),
        ("(" * 300 + "1 < 2" + ")" * 300, "gpu", "syntax error|too complex"),
    ],
)
def test_rejects(source: str, scope: Scope, problem: str) -> None:
    with pytest.raises(RuleError, match=problem):
        compile_expr(source, scope=scope)


@pytest.mark.parametrize("source", ["not " * 490 + "1 < 2", "-" * 1990 + "1 < 2", "1 + " * 490 + "1 < 2"])
def test_deep_nesting_compiles_or_fails_cleanly(source: str) -> None:
    try:
        expr = compile_expr(source)
    except RuleError:
        return
    assert expr.kind == "bool"


@pytest.mark.parametrize(
    ("source", "piece"),
    [
        ("mean(gpu_util_pct, 30m) < 5 and fooo > 1", "'fooo'"),
        ("mean(gpu_util_pct, 30m) < 5 and below_for(gpu_util_pct, 10) > 1h", "'1h'"),
        ("mean(gpu_util_pct, 1h) < 5 and bar(gpu_util_pct, 30m) > 1", "'bar'"),
        ("mean(gpu_util_pct, 30m, 2m) < 5", "'mean(gpu_util_pct, 30m, 2m)'"),
    ],
)
def test_errors_quote_the_authors_text(source: str, piece: str) -> None:
    with pytest.raises(RuleError) as e:
        compile_expr(source)
    assert piece in str(e.value)


# --- evaluation -----------------------------------------------------------------------


@pytest.fixture
def ctx() -> EvalContext:
    """GPUs a (0 %), b (50 %), c (never seen data); workloads w0 = {a, b}, w1 = {c}, and
    one holding of a GPU the store does not know at all (index -1) in w1."""
    store = WindowStore(window_s=120, interval_s=10)
    store.register(["a", "b", "c"])
    for k in range(12):
        t = T0 + timedelta(seconds=10 * k)
        store.ingest(t, [Sample("a", t, gpu_util_pct=0.0), Sample("b", t, gpu_util_pct=50.0)])
    view = store.view(T0 + timedelta(seconds=110))
    return EvalContext(
        view,
        gpu_index=np.array([0, 1, 2, -1]),
        group=np.array([0, 0, 1, 1]),
        group_size=np.array([2.0, 2.0]),
        attributes={"memory_total_mib": lambda: np.array([40960.0, 81920.0, 81920.0, np.nan])},
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("mean(gpu_util_pct, 1m) < 5", [True, False, False, False]),
        # Unknown stays unknown under not: a GPU without data never trips.
        ("not (mean(gpu_util_pct, 1m) >= 5)", [True, False, False, False]),
        ("mean(gpu_util_pct, 1m) != 3", [True, True, False, False]),
        ("mean(gpu_util_pct, 1m) < 5 or 1 < 2", [True, True, True, True]),
        ("mean(gpu_util_pct, 1m) < 5 and 1 > 2", [False, False, False, False]),
        ("0 <= mean(gpu_util_pct, 1m) < 5", [True, False, False, False]),
        ("-1 < mean(gpu_util_pct, 1m) * 2 + 1 - 100 / 4", [False, True, False, False]),
        ("max(gpu_util_pct, 2m) <= 0 and coverage(gpu_util_pct, 2m) >= 1", [True, False, False, False]),
        ("memory_total_mib > 50000", [False, True, True, False]),
        ("last(gpu_util_pct) / memory_total_mib >= 0", [True, True, False, False]),
        ("below_for(gpu_util_pct, 10) >= 1.5", [True, False, False, False]),
    ],
)
def test_evaluates_three_valued(ctx: EvalContext, source: str, expected: list[bool]) -> None:
    assert compile_expr(source).evaluate_bool(ctx).tolist() == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("share(mean(gpu_util_pct, 1m) < 5) >= 0.5", [True, True, False, False]),
        ("count(mean(gpu_util_pct, 1m) < 5) == 1", [True, True, False, False]),
        # A GPU without data is not idle: it does not count towards share().
        ("share(not (mean(gpu_util_pct, 1m) >= 5)) > 0", [True, True, False, False]),
        ("share(1 < 2) == 1", [True, True, True, True]),
        (
            "share(mean(gpu_util_pct, 1m) < 5) >= 0.5 and mean(gpu_util_pct, 1m) < 5",
            [True, False, False, False],
        ),
    ],
)
def test_group_functions(ctx: EvalContext, source: str, expected: list[bool]) -> None:
    assert compile_expr(source, scope="workload").evaluate_bool(ctx).tolist() == expected


def test_numbers_and_minutes(ctx: EvalContext) -> None:
    mins = compile_expr("below_for(gpu_util_pct, 10)", kind="num").evaluate_num(ctx)
    assert mins[0] == pytest.approx(2.0)  # 12 samples of 10 s, all below
    assert mins[1] == 0.0
    assert np.isnan(mins[2:]).all()
    assert compile_expr("2 * 30m", kind="num").evaluate_num(ctx).tolist() == [3600.0] * 4
