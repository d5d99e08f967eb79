"""Kubernetes' queue through the fake API server: Unschedulable GPU pods and placed pods' waits."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from k8s_cluster import scheduled_gpu_pod, unschedulable_gpu_pod
from test_source import caught_up, parts_for

from gpusteward.domain.errors import SourceError
from gpusteward.integrations.kubernetes.build import kubernetes_queue
from gpusteward.integrations.kubernetes.queue import gpu_model_of
from gpusteward.integrations.kubernetes.settings import KubernetesSourceSettings

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
A100 = "NVIDIA-A100-SXM4-80GB"


def affinity(*terms: list[str]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": t}]}
                    for t in terms
                ]
            }
        }
    }


@pytest.fixture
def seeded(cluster: Any) -> Any:
    put = cluster.put
    put(
        "",
        "pods",
        unschedulable_gpu_pod(
            "train-0",
            "ml",
            gpus=4,
            created="2026-01-05T11:30:00Z",
            labels={KUEUE: "team-a"},
            annotations={"gpusteward.io/owner": "bob@example.com"},
            node_selector={"nvidia.com/gpu.product": A100},
        ),
    )
    put(
        "",
        "pods",
        unschedulable_gpu_pod(
            "sweep-3",
            "research",
            gpus=1,
            created="2026-01-05T11:50:00Z",
            annotations={"scheduling.volcano.sh/queue-name": "sweeps"},
            affinity=affinity(["NVIDIA-H100-80GB-HBM3"]),
        ),
    )
    put("", "pods", unschedulable_gpu_pod("any-gpu", "research", gpus=2, created="2026-01-05T11:55:00Z"))
    cpu = unschedulable_gpu_pod("cpu-only", "research", created="2026-01-05T11:55:00Z")
    del cpu["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    put("", "pods", cpu)
    # Placed within the look-back (waited 6 min) and long before it.
    put(
        "",
        "pods",
        scheduled_gpu_pod(
            "placed", "ml", created="2026-01-05T11:40:00Z", scheduled="2026-01-05T11:46:00Z", gpus=2
        ),
    )
    put(
        "",
        "pods",
        scheduled_gpu_pod("old", "ml", created="2026-01-05T08:00:00Z", scheduled="2026-01-05T08:30:00Z"),
    )
    return cluster


KUEUE = "kueue.x-k8s.io/queue-name"


def test_unschedulable_gpu_pods_are_the_queue(seeded: Any, api_client: Any, metrics: Any) -> None:
    parts = parts_for(api_client, metrics)
    try:
        queue = kubernetes_queue(KubernetesSourceSettings(), parts)(NOW)
    finally:
        parts.source.close()
    pending = {p.id: p for p in queue.pending}
    # The scenario's own pods run (or, pod3's real Pending pod, are placed and creating).
    assert set(pending) == {"ml/train-0", "research/sweep-3", "research/any-gpu"}
    train = pending["ml/train-0"]
    assert (train.queue, train.gpus, train.gpu_model, train.reason) == ("team-a", 4, A100, "Unschedulable")
    assert train.submitted_at == datetime(2026, 1, 5, 11, 30, tzinfo=UTC)
    assert train.user == "bob@example.com"
    assert (pending["research/sweep-3"].queue, pending["research/sweep-3"].gpu_model) == (
        "sweeps",
        "NVIDIA-H100-80GB-HBM3",
    )
    assert (pending["research/any-gpu"].queue, pending["research/any-gpu"].gpu_model) == ("research", "")
    assert queue.gpus_waited_for() == 7
    assert queue.gpus_waited_for(A100) == 4 + 2  # plus the pod that takes any GPU
    assert [(s.id, s.waited_s, s.gpus) for s in queue.started] == [("ml/placed", 360.0, 2)]


def test_queue_follows_the_watch_and_the_namespaces(
    seeded: Any, server: Any, api_client: Any, metrics: Any
) -> None:
    parts = parts_for(api_client, metrics, namespaces=["ml"])
    try:
        read = kubernetes_queue(KubernetesSourceSettings(namespaces=["ml"]), parts)
        assert {p.id for p in read(NOW).pending} == {"ml/train-0"}
        # The scheduler places it: the condition turns True, the pod leaves the queue and waited 25 min.
        pod = seeded.get("", "pods", "ml", "train-0")
        pod["spec"]["nodeName"] = "gpu-node-1"
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-05T11:55:00Z"}
        ]
        seeded.put("", "pods", pod)
        caught_up(parts, server)
        queue = read(NOW)
        assert queue.pending == ()
        assert {s.id: s.waited_s for s in queue.started} == {"ml/placed": 360.0, "ml/train-0": 1500.0}
    finally:
        parts.source.close()


def test_queue_without_a_pod_list_is_a_source_error(server: Any, api_client: Any, metrics: Any) -> None:
    server.stop()
    parts = parts_for(api_client, metrics, request_timeout_seconds=0.5)
    try:
        with pytest.raises(SourceError, match="kubernetes queue"):
            kubernetes_queue(KubernetesSourceSettings(), parts)(NOW)
    finally:
        parts.source.close()


@pytest.mark.parametrize(
    ("spec", "model"),
    [
        ({"nodeSelector": {"nvidia.com/gpu.product": A100}}, A100),
        ({"affinity": affinity([A100])}, A100),
        ({"affinity": affinity([A100, "NVIDIA-H100-80GB-HBM3"])}, ""),  # either will do
        ({"affinity": affinity([A100], [A100])}, A100),
        ({"affinity": affinity([A100], ["NVIDIA-H100-80GB-HBM3"])}, ""),
        ({}, ""),
    ],
)
def test_gpu_model_from_selector_or_affinity(spec: dict[str, Any], model: str) -> None:
    assert gpu_model_of({"spec": spec}) == model
