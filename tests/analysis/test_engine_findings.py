"""Every finding's evidence, message and waste, checked one finding at a time against a
plain per-finding computation from the window view, on the benchmark's seeded cluster.

The engine builds these values column by column over all findings at once; this is the
slow, obvious way, so a slip in how the columns are cut into findings shows here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from datetime import UTC, datetime
from types import ModuleType

import pytest

from gpusteward.analysis.engine import AnalysisInput, AnalysisResult, _findings_of, analyse
from gpusteward.analysis.expr import Aggregate, format_duration
from gpusteward.analysis.rules import CompiledRule, compile_rules, default_rule_pack, parse_rule_pack
from gpusteward.domain.classes import workload_class
from gpusteward.domain.models import Finding, Gpu, Metric, RuleAction, Workload
from gpusteward.store.window import WindowView

PACK = """
rules:
  - name: everything
    kind: idle
    action: reclaim
    require_all_gpus: false
    when: mean(gpu_util_pct, 10m) < 40 and fraction_below(gpu_util_pct, 20, 5m) >= 0
    waste_minutes: below_for(gpu_util_pct, 20) - 0.5
    message: >-
      {rule} {kind} {window} {workload} {workload_id} {requested} {owner} {team} {gpu}
      {node} {util} {mem_gib} {gpus} {held} {busy} {suggest_gpus} {minutes} {gpu_hours}
      {cost} {evidence} {class} {{literal}}
  - name: instant
    kind: zombie
    action: advise
    when: last(gpu_util_pct) < 30 or last(mem_used_mib) < 1000
    message: "{util} {mem_gib} {window} {minutes} {gpu}"
  - name: plain
    kind: idle
    action: reclaim
    when: min(gpu_util_pct, 30m) < 1
    message: "no placeholders"
  - name: whole
    kind: overprovisioned
    action: advise
    scope: workload
    when: gpus_held >= 2 and share(mean(gpu_util_pct, 30m) < 30) >= 0.5 and mean(gpu_util_pct, 30m) < 30
"""


def _fmt(v: float, digits: int = 0) -> str:
    if math.isnan(v) or math.isinf(v):
        return "?"
    return str(round(v)) if digits == 0 else format(v, f".{digits}f")


def _value(view: WindowView, agg: Aggregate, uuid: str) -> float:
    i = view.index_of(uuid)
    return math.nan if i is None else float(agg.compute(view)[i])


def _expected_message(
    rule: CompiledRule, f: Finding, w: Workload, gpus: dict[str, Gpu], view: WindowView
) -> str:
    util_agg = (
        Aggregate("mean", Metric.GPU_UTIL, (rule.window_s,))
        if rule.window_s > 0
        else Aggregate("last", Metric.GPU_UTIL)
    )
    util = [v for u in f.gpu_uuids if not math.isnan(v := _value(view, util_agg, u))]
    mem = [v for u in f.gpu_uuids if not math.isnan(v := _value(view, Aggregate("last", Metric.MEM_USED), u))]
    nodes = [gpus[u].node for u in f.gpu_uuids if u in gpus]
    busy = len(w.gpu_uuids) - len(f.gpu_uuids)
    fields: dict[str, Callable[[], str]] = {
        "rule": lambda: rule.name,
        "kind": lambda: rule.kind,
        "window": lambda: format_duration(rule.window_s) if rule.window_s > 0 else "-",
        "workload": lambda: w.name,
        "workload_id": lambda: w.id,
        "requested": lambda: str(w.gpus_requested),
        "owner": lambda: w.owner.user,
        "team": lambda: w.owner.team,
        "gpu": lambda: ", ".join(gpus[u].display if u in gpus else u for u in f.gpu_uuids),
        "node": lambda: ", ".join(dict.fromkeys(nodes)) or "?",
        "util": lambda: _fmt(max(util)) if util else "?",
        "mem_gib": lambda: _fmt(sum(mem) / 1024.0, 1) if mem else "?",
        "gpus": lambda: str(len(f.gpu_uuids)),
        "held": lambda: str(len(w.gpu_uuids)),
        "busy": lambda: str(busy),
        "suggest_gpus": lambda: str(max(1, busy)),
        "minutes": lambda: _fmt(f.wasted_minutes),
        "gpu_hours": lambda: _fmt(f.wasted_gpu_hours, 2),
        "cost": lambda: _fmt(f.wasted_cost, 2),
        "evidence": lambda: "-",  # its `when` reads no long-window evidence
        "class": lambda: workload_class(w),
    }
    template = " ".join((rule.spec.message or "{rule}: {gpu} ({kind}) for {minutes} min").split())
    return template.format(**{name: make() for name, make in fields.items()})


@pytest.fixture
def tick(load_bench: Callable[[str], ModuleType]) -> tuple[AnalysisInput, AnalysisResult]:
    bench = load_bench("engine")
    sc = bench.build(3000, seed=1)
    # Some GPUs missing from the inventory (their uuid stands in the message) and a job on
    # GPUs the store has never seen (no evidence for them, never judged).
    gpus = {u: g for i, (u, g) in enumerate(sc.gpus.items()) if i % 37}
    ghost = dataclasses.replace(sc.workloads[0], id="ghost", gpu_uuids=("GPU-x", "GPU-y"))
    inp = AnalysisInput(
        sc.store.view(bench.NOW), gpus, [*sc.workloads, ghost], bench.NOW, bench.STALE_AFTER_S
    )
    rules = compile_rules(default_rule_pack()) + compile_rules(parse_rule_pack(PACK, "pack.yaml"))
    return inp, analyse(rules, inp)


def test_every_finding_matches_a_per_finding_computation(
    tick: tuple[AnalysisInput, AnalysisResult],
) -> None:
    inp, result = tick
    rules = {
        r.name: r for r in compile_rules(default_rule_pack()) + compile_rules(parse_rule_pack(PACK, "p.yaml"))
    }
    workloads = {w.id: w for w in inp.workloads}
    gpus = dict(inp.gpus)
    # Every rule and every message field is exercised, not just the easy ones.
    # The bench keeps 30 min: the 3.5-h service rule is never judged there; its workloads
    # are jobs, so the notebook rule has nothing to judge either. It reads no GPU health
    # (tests/analysis/test_health_rules.py covers those rules).
    long_or_other_class = {"overprovisioned", "quiet-service", "idle-notebook"}
    long_or_other_class |= {"gpu-failed", "gpu-degrading", "gpu-throttled"}
    assert {f.rule for f in result.findings} == set(rules) - long_or_other_class
    assert any(u not in gpus for f in result.findings for u in f.gpu_uuids)
    assert any(0 < len(f.gpu_uuids) < len(workloads[f.workload_id or ""].gpu_uuids) for f in result.findings)
    for f in result.findings:
        rule, w = rules[f.rule], workloads[f.workload_id or ""]
        assert type(f.gpu_uuids) is tuple
        assert set(f.gpu_uuids) <= set(w.gpu_uuids)
        expected_evidence = {
            agg.text: {u: v for u in f.gpu_uuids if not math.isnan(v := _value(inp.view, agg, u))}
            for agg in rule.when.aggregates
        }
        assert f.evidence == expected_evidence, f
        assert type(f.evidence) is dict
        assert all(type(d) is dict for d in f.evidence.values())
        assert f.message == _expected_message(rule, f, w, gpus, inp.view), f
        prices = sum(gpus[u].price_per_hour if u in gpus else 0.0 for u in f.gpu_uuids)
        assert f.wasted_gpu_hours == f.wasted_minutes / 60.0 * len(f.gpu_uuids)
        assert f.wasted_cost == pytest.approx(prices * f.wasted_minutes / 60.0, rel=1e-12)
        if rule.waste is None:
            assert f.wasted_minutes == rule.window_s / 60.0
    keys = [(f.rule, f.workload_id or "", f.gpu_uuids) for f in result.findings]
    assert keys == sorted(keys)


def test_findings_built_column_by_column_are_the_constructors_and_stay_frozen() -> None:
    at = datetime(2026, 3, 1, tzinfo=UTC)
    columns = (
        ["zombie", "idle"],
        ["zombie", "idle"],
        [RuleAction.RECLAIM, RuleAction.ADVISE],
        [at, at],
        [("GPU-0",), ("GPU-1", "GPU-2")],
        ["w1", None],
        [{"mean": {"GPU-0": 1.0}}, {}],
        [30.0, 10.0],
        [0.5, 0.3],
        [1.5, 0.9],
        ["zombie on GPU-0", ""],
    )
    got = _findings_of(2, columns)
    assert got == list(map(Finding, *columns))
    assert [f.key for f in got] == ["w1:zombie", "-:idle"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        got[0].message = "changed"  # type: ignore[misc]
