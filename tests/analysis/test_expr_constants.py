"""Aggregates that are one number for every holding (a metric the store holds no data for, as
the health readings of a source without them): the expression reads that number instead of an
array of copies, and a repair rule over such metrics only is not judged GPU by GPU at all.
Each shortcut is held to the plain evaluation over arrays."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gpusteward.analysis.aggregates import AGGREGATES, Aggregate, EvalContext
from gpusteward.analysis.engine import AnalysisInput, analyse
from gpusteward.analysis.expr import compile_expr
from gpusteward.analysis.rules import compile_rules, default_rule_pack, parse_rule_pack
from gpusteward.domain.models import Gpu, Metric, Owner, RuleAction, Sample, Workload, WorkloadKind
from gpusteward.store.window import WindowStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(seconds=110)
#: Arguments after the metric, per aggregate function.
ARGS = {"number": 5.0, "duration": 60.0}


class Plain(EvalContext):
    """The evaluation without the shortcut: every aggregate an array over the holdings."""

    def constant(self, agg: Aggregate) -> np.float64 | None:
        return None


def _store(metrics: tuple[Metric, ...] = tuple(Metric), **health: float) -> WindowStore:
    """GPUs a and b with utilisation and memory; ``health`` readings on a only."""
    store = WindowStore(window_s=120, interval_s=10, metrics=metrics)
    store.register(["a", "b", "c"])
    for k in range(12):
        t = T0 + timedelta(seconds=10 * k)
        store.ingest(
            t,
            [
                Sample("a", t, gpu_util_pct=0.0, mem_used_mib=2048.0, **health),
                Sample("b", t, gpu_util_pct=50.0, mem_used_mib=2048.0),
            ],
        )
    return store


def _ctx(store: WindowStore, index: list[int], cls: type[EvalContext] = EvalContext) -> EvalContext:
    n = len(index)
    return cls(
        store.view(NOW),
        gpu_index=np.array(index),
        group=np.arange(n),
        group_size=np.ones(n),
        attributes={"price_per_hour": lambda: np.full(n, 2.0)},
    )


def _every_aggregate(m: Metric) -> list[Aggregate]:
    return [Aggregate(f, m, tuple(ARGS[r] for r in roles[1:])) for f, roles in AGGREGATES.items()]


@pytest.mark.parametrize("store_metrics", ["all", "without-temperature"])
@pytest.mark.parametrize("index", [[0, 1, 2], [0, 1, 2, -1]], ids=["all-seen", "one-never-seen"])
def test_a_constant_is_the_value_of_every_holding(store_metrics: str, index: list[int]) -> None:
    metrics = tuple(Metric) if store_metrics == "all" else (Metric.GPU_UTIL, Metric.MEM_USED)
    store = _store(metrics)
    ctx, plain = _ctx(store, index), _ctx(store, index, Plain)
    constants = 0
    for agg in _every_aggregate(Metric.TEMP):
        full = plain.aggregate(agg)
        c = ctx.constant(agg)
        if c is None:  # only a number a never-seen GPU (NaN) does not share
            assert -1 in index
            assert not np.isnan(full[0])
            continue
        constants += 1
        assert np.array_equal(full, np.full(len(index), c), equal_nan=True), agg.text
    assert constants >= len(AGGREGATES) - 1
    for agg in _every_aggregate(Metric.GPU_UTIL):  # a metric with data is never a constant
        assert ctx.constant(agg) is None


@pytest.mark.parametrize(
    "source",
    [
        "coverage(temp_c, 1m) == 0",
        "coverage(temp_c, 1m) < 0.8 and mean(gpu_util_pct, 1m) < 5",
        "max(xid_fatal, 1m) > 0 or last(ecc_dbe_count) > 0",
        "not (max(xid_fatal, 1m) > 0) and last(mem_used_mib) > 1024",
        "increase(pcie_replay_count, 1m) >= 100 or slope(temp_c, 1m) > 2",
        "mean(throttled, 1m) * 2 + 1 > price_per_hour",
        "below_for(temp_c, 80) >= 0 or watched_for(temp_c) >= 0 or zero_for(gpu_util_pct) >= 1",
    ],
)
@pytest.mark.parametrize("index", [[0, 1, 2], [0, 1, 2, -1]], ids=["all-seen", "one-never-seen"])
def test_an_expression_reads_constants_as_the_arrays_would_be(source: str, index: list[int]) -> None:
    store = _store()
    expr = compile_expr(source)
    fast, plain = expr.evaluate_bool(_ctx(store, index)), expr.evaluate_bool(_ctx(store, index, Plain))
    assert fast.shape == plain.shape == (len(index),)
    assert fast.tolist() == plain.tolist()


def test_never_is_sure_only_when_no_holding_can_hold() -> None:
    blank, failing = _store(), _store(xid_fatal=1.0)
    ctx = _ctx(blank, [0, 1, 2])
    health = [r for r in compile_rules(default_rule_pack()) if r.action is RuleAction.REPAIR]
    assert health
    assert all(r.when.never(ctx) for r in health)
    failed = next(r for r in health if r.name == "gpu-failed")
    assert not failed.when.never(_ctx(failing, [0, 1, 2]))  # a reading to judge
    assert not compile_expr("coverage(temp_c, 1m) == 0").never(ctx)  # true for every GPU
    assert not compile_expr("max(xid_code, 1m) > 0 or price_per_hour > 1").never(ctx)  # an attribute


def _gpu(u: str) -> Gpu:
    return Gpu(u, "n1", 0, "H100", 81559, 2.0)


@pytest.mark.parametrize(
    ("when", "found"), [("coverage(temp_c, 1m) == 0", True), ("max(xid_fatal, 1m) > 0", False)]
)
def test_a_repair_rule_over_blank_metrics_is_judged_as_before(when: str, found: bool) -> None:
    """A condition true for every GPU still finds each (free and held); a false one finds none."""
    text = f"rules:\n  - name: r\n    kind: health\n    action: repair\n    when: {when}\n"
    rules = compile_rules(parse_rule_pack(text))
    store = _store()
    held = Workload("w", WorkloadKind.JOB, "w", Owner("u"), 1, ("a",), T0)
    gpus = {u: _gpu(u) for u in ("a", "b")}
    t = NOW
    store.ingest(t, [Sample(u, t, gpu_util_pct=1.0) for u in gpus])
    res = analyse(rules, AnalysisInput(store.view(t), gpus, [held], t))
    got = sorted((f.gpu_uuids, f.workload_id) for f in res.findings)
    expected = [(("a",), "w"), (("b",), None)]  # one per GPU and holder, a free GPU with none
    assert got == (expected if found else [])
