"""A spot interruption's two steps on Kubernetes, against the fake API server: the checkpoint
annotation on every pod of a workload (read, then patched with its resourceVersion), and near the
deadline the eviction (PDBs honoured), through the interruption step's executor adapter."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from test_source import parts_for

from gpusteward.domain.cloud import INTERRUPTION_CHECKPOINT_STEP
from gpusteward.domain.errors import PreflightFailed
from gpusteward.domain.models import Decision, Level, Workload
from gpusteward.integrations.kubernetes.build import KubernetesParts
from gpusteward.integrations.kubernetes.interruption import CHECKPOINT_REQUESTED_KEY
from gpusteward.integrations.kubernetes.podref import pods_of
from gpusteward.runtime.interruption_step import INTERRUPTION_REQUEUE_STEP, CheckpointExecutor

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


@pytest.fixture
def parts(api_client: Any, metrics: Any) -> Any:
    p = parts_for(api_client, metrics, eviction_grace_seconds=30)
    yield p
    p.source.close()


def _workloads(parts: KubernetesParts) -> dict[str, Workload]:
    return {w.id: w for w in parts.source.observe(NOW).workloads}


def _decision(w: Workload, level: Level) -> Decision:
    step = INTERRUPTION_CHECKPOINT_STEP if level is Level.GRACEFUL_STOP else INTERRUPTION_REQUEUE_STEP
    return Decision(w.id, NOW, level, step, "spot interruption", gpu_uuids=w.gpu_uuids, idempotency_key=step)


def _pods(cluster: Any, w: Workload) -> list[Any]:
    return [cluster.get("", "pods", w.ref["namespace"], name) for name, _ in pods_of(w.ref)]


def test_every_pod_of_the_workload_is_annotated_once(parts: KubernetesParts, cluster: Any) -> None:
    w = _workloads(parts)["k8s:ml/deployment/llm-serve"]
    adapter = CheckpointExecutor(parts.executor)
    assert adapter.supports(w, Level.GRACEFUL_STOP)
    out = adapter.execute(_decision(w, Level.GRACEFUL_STOP), w)
    assert out.ok, out.detail
    pods = [p for p in _pods(cluster, w) if p is not None]
    assert len(pods) == 2
    assert all(p["metadata"]["annotations"][CHECKPOINT_REQUESTED_KEY] == "2026-01-05T12:00:00Z" for p in pods)
    assert cluster.get("apps", "deployments", "ml", "llm-serve")["spec"]["replicas"] == 2  # nothing stopped
    patches = [c for c in cluster.calls if c.resource == "pods" and c.method == "PATCH"]
    adapter.execute(_decision(w, Level.GRACEFUL_STOP), w)  # again: already there, nothing written
    assert [c for c in cluster.calls if c.resource == "pods" and c.method == "PATCH"] == patches


def test_eviction_near_the_deadline_honours_the_pdb(parts: KubernetesParts, cluster: Any) -> None:
    w = _workloads(parts)["k8s:ml/pod/idle-pod"]
    adapter = CheckpointExecutor(parts.executor)
    assert adapter.supports(w, Level.FORCE)
    # Refused by the budget: recorded as not done, never turned into a failure for a retry.
    with pytest.raises(PreflightFailed, match="PodDisruptionBudget"):
        adapter.execute(_decision(w, Level.FORCE), w)
    pdb = cluster.get("policy", "poddisruptionbudgets", "ml", "scratch-pdb")
    pdb["status"]["disruptionsAllowed"] = 1
    cluster.put("policy", "poddisruptionbudgets", pdb)
    out = adapter.execute(_decision(w, Level.FORCE), w)
    assert out.ok
    assert cluster.get("", "pods", "ml", "idle-pod") is None
