"""``{mem_gib}`` in a finding's message: the memory its GPUs hold now, summed over the GPUs with a
reading; a GPU without one is left out, and a finding none of whose GPUs has one says "?"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpusteward.analysis.engine import AnalysisInput, analyse
from gpusteward.analysis.rules import compile_rules, parse_rule_pack
from gpusteward.domain.models import Gpu, Owner, Sample, Workload, WorkloadKind
from gpusteward.store.window import WindowStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PACK = """
rules:
  - name: quiet
    kind: idle
    when: mean(gpu_util_pct, 1m) < 5
    message: "{gpus} GPUs hold {mem_gib} GiB"
"""
#: MiB each GPU holds; None: no memory reading at all.
MEM = {"a": 1024.0, "b": 255.5, "c": None, "d": None}


def test_memory_is_summed_over_the_gpus_with_a_reading() -> None:
    store = WindowStore(window_s=120, interval_s=10)
    store.register(list(MEM))
    for k in range(12):
        t = T0 + timedelta(seconds=10 * k)
        store.ingest(t, [Sample(u, t, gpu_util_pct=0.0, mem_used_mib=mib) for u, mib in MEM.items()])
    now = T0 + timedelta(seconds=110)
    gpus = {u: Gpu(u, "n1", i, "H100", 81559, 2.0) for i, u in enumerate(MEM)}
    jobs = [
        Workload("ab", WorkloadKind.JOB, "ab", Owner("u"), 2, ("a", "b"), T0),  # 1,279.5 MiB
        Workload("bc", WorkloadKind.JOB, "bc", Owner("u"), 2, ("b", "c"), T0),  # c has none
        Workload("cd", WorkloadKind.JOB, "cd", Owner("u"), 2, ("c", "d"), T0),  # neither has
    ]
    res = analyse(compile_rules(parse_rule_pack(PACK)), AnalysisInput(store.view(now), gpus, jobs, now))
    assert {f.workload_id: f.message for f in res.findings} == {
        "ab": "2 GPUs hold 1.2 GiB",  # 1279.5 / 1024 = 1.2495
        "bc": "2 GPUs hold 0.2 GiB",  # 255.5 / 1024 = 0.2495: c adds nothing, not even 1 MiB
        "cd": "2 GPUs hold ? GiB",
    }
