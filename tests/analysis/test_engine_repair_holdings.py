"""Repair rules judge every GPU once per holder. The engine builds those (GPU, holder) pairs
from array indices (no per-GPU workload objects); here they are checked against the plain
construction, one GPU at a time, on a fleet with shared, free, unknown and unlisted GPUs."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gpusteward.analysis.engine import AnalysisInput, analyse
from gpusteward.analysis.rules import compile_rules, default_rule_pack
from gpusteward.domain.models import Finding, Gpu, Metric, Owner, RuleAction, Sample, Workload, WorkloadKind
from gpusteward.store.window import WindowStore

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
N = 40
RULES = compile_rules(default_rule_pack(), window_s=4 * 3600)
HEALTH = [r for r in RULES if r.action is RuleAction.REPAIR]
FATAL = {Metric.XID: [0.0] * 30 + [79.0] + [0.0] * 9, Metric.XID_FATAL: [0.0] * 30 + [1.0] + [0.0] * 9}
THROTTLED = {Metric.THROTTLED: [0.0] * 5 + [1.0] * 35}


def _gpu(u: str) -> Gpu:
    return Gpu(u, node="n1", index=0, model="H100", memory_total_mib=81559, price_per_hour=2.0)


def _job(wid: str, *uuids: str) -> Workload:
    return Workload(wid, WorkloadKind.JOB, f"train-{wid}", Owner("ada", "ml"), len(uuids), uuids, T0)


def _store(health: dict[str, dict[Metric, list[float]]]) -> WindowStore:
    store = WindowStore(window_s=4 * 3600, interval_s=60)
    store.register(health)
    for i in range(N):
        at = T0 + timedelta(minutes=i)
        samples = [
            Sample(u, at, gpu_util_pct=0.0, mem_used_mib=2048.0, **{m.value: v[i] for m, v in per.items()})
            for u, per in health.items()
        ]
        store.ingest(at, samples, {})
    return store


def _one_gpu_at_a_time(store: WindowStore, inp: AnalysisInput) -> list[Finding]:
    """Each GPU of ``inp.gpus`` alone, with each of its holders narrowed to it (or none)."""
    out: list[Finding] = []
    for u, gpu in inp.gpus.items():
        holders = [replace(w, gpu_uuids=(u,)) for w in inp.workloads if u in w.gpu_uuids]
        res = analyse(HEALTH, AnalysisInput(store.view(inp.now), {u: gpu}, holders, inp.now))
        out.extend(res.findings)
    return sorted(out, key=lambda f: (f.rule, f.workload_id or "", f.gpu_uuids))


@pytest.mark.parametrize("unknown_gpu", [False, True], ids=["all-in-store", "one-never-seen"])
def test_per_gpu_holdings_match_one_gpu_at_a_time(unknown_gpu: bool) -> None:
    health = {
        "GPU-a": FATAL,  # held by two jobs: one finding per holder
        "GPU-b": THROTTLED,  # held by one of them
        "GPU-c": FATAL,  # free
        "GPU-d": THROTTLED,  # free
        "GPU-e": {},  # held, healthy
        "GPU-x": FATAL,  # in the store, held, but not a listed GPU: never judged
    }
    store = _store(health)
    gpus = {u: _gpu(u) for u in ("GPU-d", "GPU-a", "GPU-e", "GPU-c", "GPU-b")}  # not in uuid order
    if unknown_gpu:
        gpus["GPU-z"] = _gpu("GPU-z")  # listed, never sampled
    workloads = [_job("job-2", "GPU-a", "GPU-b", "GPU-x"), _job("job-1", "GPU-e", "GPU-a")]
    now = T0 + timedelta(minutes=N - 1)
    inp = AnalysisInput(store.view(now), gpus, workloads, now)

    got = [f for f in analyse(RULES, inp).findings if f.action is RuleAction.REPAIR]

    assert got == _one_gpu_at_a_time(store, inp)
    assert {(f.rule, f.gpu_uuids, f.workload_id) for f in got} == {
        ("gpu-failed", ("GPU-a",), "job-1"),
        ("gpu-failed", ("GPU-a",), "job-2"),
        ("gpu-failed", ("GPU-c",), None),
        ("gpu-throttled", ("GPU-b",), "job-2"),
        ("gpu-throttled", ("GPU-d",), None),
    }
