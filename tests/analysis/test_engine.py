"""The analysis engine on realistic GPU histories, with the default rule pack."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from gpusteward.analysis.engine import AnalysisInput, AnalysisResult, analyse
from gpusteward.analysis.rules import CompiledRule, compile_rules, default_rule_pack, parse_rule_pack
from gpusteward.domain.models import Finding, Gpu, Owner, RuleAction, Sample, Workload, WorkloadKind
from gpusteward.store.window import WindowStore

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
RULES = compile_rules(default_rule_pack(), window_s=4 * 3600)


@dataclass(frozen=True)
class Seg:
    """A stretch of a GPU's history. ``util=None``: no samples at all (a gap)."""

    minutes: float
    util: float | None
    mem: float = 0.0
    cpu: float = 50.0
    holder: str = "job"


def gpu(uuid: str, index: int = 0, model: str = "NVIDIA A100-SXM4-80GB", price: float = 2.5) -> Gpu:
    return Gpu(uuid, node="a100-07", index=index, model=model, memory_total_mib=81920, price_per_hour=price)


def job(wid: str, uuids: list[str], started_min_ago: float = 120, requested: int | None = None) -> Workload:
    return Workload(
        id=wid,
        kind=WorkloadKind.JOB,
        name=f"train-{wid}",
        owner=Owner("alice", "vision"),
        gpus_requested=len(uuids) if requested is None else requested,
        gpu_uuids=tuple(uuids),
        started_at=NOW - timedelta(minutes=started_min_ago),
    )


def run(
    plans: dict[str, list[Seg]],
    workloads: list[Workload],
    gpus: list[Gpu] | None = None,
    rules: list[CompiledRule] = RULES,
) -> AnalysisResult:
    """Replay ``plans`` (each ending at NOW) into a 60-min window store, then analyse."""
    store = WindowStore(window_s=3600, interval_s=10)
    total = max(sum(s.minutes for s in segs) for segs in plans.values())
    steps = int(total * 6)
    for k in range(steps + 1):
        t = NOW - timedelta(seconds=10 * (steps - k))
        elapsed = k / 6
        samples, holders = [], {}
        for uuid, segs in plans.items():
            start = total - sum(s.minutes for s in segs)  # shorter plans start later
            if elapsed < start:
                continue
            acc = start
            seg = segs[-1]
            for s in segs:
                if elapsed < acc + s.minutes:
                    seg = s
                    break
                acc += s.minutes
            holders[uuid] = seg.holder
            if seg.util is not None:
                samples.append(
                    Sample(uuid, t, gpu_util_pct=seg.util, mem_used_mib=seg.mem, proc_cpu_pct=seg.cpu)
                )
        store.ingest(t, samples, holders)
    known = gpus if gpus is not None else [gpu(u, i) for i, u in enumerate(plans)]
    inp = AnalysisInput(view=store.view(NOW), gpus={g.uuid: g for g in known}, workloads=workloads, now=NOW)
    return analyse(rules, inp)


def by_rule(result: AnalysisResult) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in result.findings:
        out.setdefault(f.rule, []).append(f)
    return out


ZOMBIE = [Seg(30, 95, 38000, 100), Seg(60, 0, 38000, 0.5)]


def test_zombie_is_found_with_evidence_and_cost() -> None:
    result = run({"g3": ZOMBIE}, [job("j1", ["g3"])], gpus=[gpu("g3", index=3)])
    found = by_rule(result)
    assert set(found) == {"zombie", "idle-allocation", "stalled"}
    z = found["zombie"][0]
    assert (z.kind, z.action, z.workload_id, z.gpu_uuids, z.at) == (
        "zombie",
        RuleAction.RECLAIM,
        "j1",
        ("g3",),
        NOW,
    )
    assert z.evidence == {"mean(gpu_util_pct, 30m)": {"g3": 0.0}, "last(mem_used_mib)": {"g3": 38000.0}}
    assert z.wasted_minutes == 30.0
    assert z.wasted_gpu_hours == pytest.approx(0.5)
    assert z.wasted_cost == pytest.approx(2.5 * 0.5)
    assert z.message == "a100-07/gpu3 averaged 0% GPU utilisation for 30 min while holding 37.1 GiB"
    assert found["stalled"][0].evidence["max(proc_cpu_pct, 10m)"] == {"g3": 0.5}
    assert result.stale_gpus == frozenset()


def test_idle_waste_is_the_length_of_the_idle_run() -> None:
    result = run({"g": [Seg(15, 80, 2000), Seg(45, 3, 500)]}, [job("j", ["g"])])
    idle = by_rule(result)["idle-allocation"][0]
    # The last busy sample is 45 min + one 10 s slot before now.
    assert idle.wasted_minutes == pytest.approx(45 + 1 / 6)
    assert "zombie" not in by_rule(result)  # 500 MiB is a context, not a held allocation


@pytest.mark.parametrize(
    ("name", "plan", "started_min_ago"),
    [
        ("checkpoint dip of 4 min, now", [Seg(56, 92, 70000, 100), Seg(4, 0, 70000, 5)], 120),
        (
            "checkpoint dip of 4 min, ended",
            [Seg(40, 92, 70000, 100), Seg(4, 0, 70000, 5), Seg(16, 90, 70000)],
            120,
        ),
        (
            "model loading for 10 min, still loading",
            [Seg(50, 0, 0, 0, holder=""), Seg(10, 0, 20000, 100)],
            10,
        ),
        (
            "model loading for 10 min, then busy",
            [Seg(40, 0, 0, 0, holder=""), Seg(10, 0, 20000, 100), Seg(10, 85, 20000, 100)],
            20,
        ),
        ("busy inference", [Seg(60, 35, 30000, 20)], 120),
        ("half the samples missing", [Seg(1, 0, 38000, 0), Seg(1, None)] * 30, 120),
    ],
)
def test_busy_or_unknown_gpus_are_not_found(name: str, plan: list[Seg], started_min_ago: float) -> None:
    result = run({"g": plan}, [job("j", ["g"], started_min_ago=started_min_ago)])
    assert result.findings == (), name


def test_rules_that_could_not_judge_a_workload_say_so() -> None:
    """Ten minutes after a restart (or a new holder) stalled can judge, zombie cannot yet."""
    result = run(
        {"g": [Seg(10, 90, 30000)], "h": [Seg(60, 90, 30000)]}, [job("new", ["g"]), job("old", ["h"])]
    )
    assert result.findings == ()
    assert result.unjudged["zombie"] == {"new"}
    assert result.unjudged["idle-allocation"] == {"new"}
    assert result.unjudged["stalled"] == set()
    assert result.unjudged["overprovisioned"] == {"new"}
    assert result.unknown_workloads == set()


def test_holder_history_is_what_protects_a_loading_model() -> None:
    """Without the holder change the idle hour before the job would count against it."""
    plan = [Seg(50, 0, 0, 0), Seg(10, 0, 20000, 0)]  # same holder throughout
    assert "zombie" in by_rule(run({"g": plan}, [job("j", ["g"])]))


def test_stale_gpu_is_never_found_and_is_reported() -> None:
    plans = {"g": [Seg(55, 0, 38000, 0), Seg(5, None)], "h": ZOMBIE}
    result = run(plans, [job("j", ["g"]), job("k", ["h"]), job("ghost", ["never-seen"])])
    assert {f.workload_id for f in result.findings} == {"k"}
    assert result.stale_gpus == {"g", "never-seen"}
    assert result.unknown_workloads == {"j", "ghost"}


def test_unheld_gpu_is_never_found() -> None:
    result = run({"g": ZOMBIE, "h": ZOMBIE}, [job("j", ["h"])])
    assert {u for f in result.findings for u in f.gpu_uuids} == {"h"}


def test_partly_busy_workload_is_not_reclaimed_but_advised() -> None:
    busy = [Seg(70, 90, 60000, 100)]
    idle = [Seg(10, 90, 60000, 100), Seg(60, 0, 2048, 0)]
    plans = {f"g{i}": (busy if i < 2 else idle) for i in range(8)}
    result = run(plans, [job("big", list(plans))])
    found = by_rule(result)
    assert set(found) == {"overprovisioned"}
    advice = found["overprovisioned"][0]
    assert advice.action is RuleAction.ADVISE
    assert advice.gpu_uuids == tuple(f"g{i}" for i in range(2, 8))
    assert advice.wasted_gpu_hours == pytest.approx(6 * 1.0)
    assert advice.wasted_cost == pytest.approx(6 * 2.5)
    assert "request 2 of 8" in advice.message
    assert advice.evidence["mean(gpu_util_pct, 1h)"]["g5"] == 0.0


def test_all_idle_multi_gpu_workload_is_reclaimed_with_summed_cost() -> None:
    gpus = [gpu("a", 0, "NVIDIA A100-SXM4-80GB", 2.5), gpu("b", 1, "NVIDIA H100 80GB HBM3", 3.0)]
    result = run({"a": ZOMBIE, "b": ZOMBIE}, [job("pair", ["a", "b"])], gpus=gpus)
    z = by_rule(result)["zombie"][0]
    assert z.gpu_uuids == ("a", "b")
    assert z.wasted_gpu_hours == pytest.approx(2 * 0.5)
    assert z.wasted_cost == pytest.approx((2.5 + 3.0) * 0.5)
    assert "a100-07/gpu0, a100-07/gpu1" in z.message
    assert "74.2 GiB" in z.message
    # Idle on every GPU is waste to reclaim, not a workload that asked for too many.
    assert "overprovisioned" not in by_rule(result)


def test_require_all_gpus_can_be_turned_off() -> None:
    text = """\
rules:
  - name: any-idle
    kind: idle
    require_all_gpus: false
    when: max(gpu_util_pct, 10m) < 1
"""
    rules = compile_rules(parse_rule_pack(text))
    plans = {"a": [Seg(60, 0, 2048)], "b": [Seg(60, 90, 2048)]}
    result = run(plans, [job("w", ["a", "b"])], rules=rules)
    assert [f.gpu_uuids for f in result.findings] == [("a",)]
    assert result.findings[0].message == "any-idle: a100-07/gpu0 (idle) for 10 min"


def test_findings_are_sorted() -> None:
    plans = dict.fromkeys(("x", "y", "z"), ZOMBIE)
    result = run(plans, [job("w3", ["z"]), job("w1", ["x"]), job("w2", ["y"])])
    keys = [(f.rule, f.workload_id) for f in result.findings]
    assert keys == sorted(keys)
    assert [k for k in keys if k[0] == "zombie"] == [("zombie", "w1"), ("zombie", "w2"), ("zombie", "w3")]


def test_shared_gpu_is_judged_for_each_holder() -> None:
    result = run({"g": ZOMBIE}, [job("a", ["g"]), job("b", ["g"])])
    assert {f.workload_id for f in by_rule(result)["zombie"]} == {"a", "b"}


def test_attributes_reach_the_rules() -> None:
    text = """\
rules:
  - name: young-big
    kind: test
    when: age_minutes < 60 and gpus_requested > gpus_held and memory_total_mib > 80000 and price_per_hour > 2
"""
    rules = compile_rules(parse_rule_pack(text))
    result = run({"g": [Seg(60, 50)]}, [job("w", ["g"], started_min_ago=30, requested=2)], rules=rules)
    assert [f.rule for f in result.findings] == ["young-big"]
    older = run({"g": [Seg(60, 50)]}, [job("w", ["g"], started_min_ago=90, requested=2)], rules=rules)
    assert older.findings == ()


def test_empty_cluster_and_empty_store() -> None:
    store = WindowStore(window_s=3600, interval_s=10)
    nothing = analyse(RULES, AnalysisInput(view=store.view(NOW), gpus={}, workloads=[], now=NOW))
    assert (nothing.findings, nothing.stale_gpus, nothing.unknown_workloads) == ((), frozenset(), frozenset())
    assert dict(nothing.unjudged) == {r.name: frozenset() for r in RULES}
    blind = analyse(RULES, AnalysisInput(view=store.view(NOW), gpus={}, workloads=[job("j", ["g"])], now=NOW))
    assert blind.findings == ()
    assert blind.stale_gpus == {"g"}
    assert blind.unknown_workloads == {"j"}
    assert blind.unjudged["zombie"] == {"j"}
