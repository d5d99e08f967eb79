"""Pool demand from the window or an observation: pools of GPUs, and pools of workloads (an
inference Deployment is a pool of its own, wherever its GPUs run)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpusteward.domain.models import Gpu, Observation, Owner, Sample, Workload, WorkloadKind
from gpusteward.runtime.demand import held_pools, observation_demand, pool_demand
from gpusteward.store.window import WindowStore

T0 = datetime(2025, 3, 4, 12, 0, tzinfo=UTC)
GPUS = {
    u: Gpu(u, node, i, "NVIDIA A100", 81920, pool="a100")
    for i, (u, node) in enumerate((("g0", "n1"), ("g1", "n1"), ("g2", "n2"), ("g3", "n2")))
}
LLM = Workload(
    "k8s:ml/deployment/llm", WorkloadKind.POD, "llm", Owner("ml"), 2, ("g0", "g2"), T0 - timedelta(hours=1)
)
TRAIN = Workload(
    "k8s:ml/job/train", WorkloadKind.POD, "train", Owner("ml"), 1, ("g1",), T0 - timedelta(hours=1)
)
MEMBERS = {"ml/deployment/llm": ["k8s:ml/deployment/llm"]}
UTIL = {"g0": 50.0, "g1": 100.0, "g2": 30.0, "g3": 0.0}


def window() -> WindowStore:
    ws = WindowStore(window_s=600, interval_s=60)
    ws.register(GPUS)
    holders = {"g0": LLM.id, "g1": TRAIN.id, "g2": LLM.id, "g3": ""}
    for k in range(6):
        at = T0 - timedelta(minutes=5 - k)
        ws.ingest(at, [Sample(u, at, gpu_util_pct=v) for u, v in UTIL.items()], holders)
    return ws


def test_a_workload_pool_takes_its_gpus_out_of_the_node_pool() -> None:
    assert held_pools([LLM, TRAIN], GPUS, MEMBERS) == {
        "g0": "ml/deployment/llm",
        "g2": "ml/deployment/llm",
        "g1": "a100",
    }
    assert held_pools([LLM, TRAIN], GPUS) == dict.fromkeys(("g0", "g1", "g2"), "a100")


@pytest.mark.parametrize(
    ("measure", "want"),
    [("busy", {"ml/deployment/llm": 0.8, "a100": 1.0}), ("held", {"ml/deployment/llm": 2.0, "a100": 1.0})],
)
def test_window_and_observation_count_the_same(measure: str, want: dict[str, float]) -> None:
    got = pool_demand(window().view(T0), GPUS, [LLM, TRAIN], measure=measure, members=MEMBERS)
    assert got == pytest.approx(want)
    obs = Observation(
        T0, tuple(GPUS.values()), tuple(Sample(u, T0, gpu_util_pct=v) for u, v in UTIL.items()), (LLM, TRAIN)
    )
    assert observation_demand(obs, measure=measure, members=MEMBERS) == pytest.approx(want)


def test_a_workload_pool_with_nothing_running_is_zero_demand() -> None:
    got = pool_demand(window().view(T0), GPUS, [TRAIN], members=MEMBERS)
    assert got == pytest.approx({"ml/deployment/llm": 0.0, "a100": 1.0})
