"""The Kubernetes executor against the fake API server: scale with annotation, 409 retry,
Kubeflow stop, eviction and its PodDisruptionBudget, force delete, events, pre-flight."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from test_source import parts_for

from gpusteward.domain.errors import ExecutionError, PreflightFailed
from gpusteward.domain.models import PROTECT_KEY, Decision, Level, Workload
from gpusteward.integrations.kubernetes.build import KubernetesParts, restore_workload
from gpusteward.integrations.kubernetes.control import KUBEFLOW_STOPPED_KEY, ORIGINAL_REPLICAS_KEY
from gpusteward.integrations.kubernetes.model import PROTECT_REASON_KEY
from gpusteward.integrations.kubernetes.scale_floor import FLOOR_REF, MIN_REPLICAS_KEY, WAKES_ON_DEMAND_KEY
from gpusteward.runtime.config import load_settings

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def stop(w: Workload, level: Level = Level.GRACEFUL_STOP) -> Decision:
    step = "graceful-stop" if level is Level.GRACEFUL_STOP else "force"
    return Decision(
        w.id,
        NOW,
        level,
        step,
        "idle for 60 min",
        rule="idle-allocation",
        gpu_uuids=w.gpu_uuids,
        idempotency_key=f"{w.id}:{w.incarnation}:{step}",
    )


@pytest.fixture
def parts(api_client: Any, metrics: Any) -> Any:
    p = parts_for(api_client, metrics, force_delete_namespaces=["ml"], eviction_grace_seconds=30)
    yield p
    p.source.close()


def workloads(parts: KubernetesParts) -> dict[str, Workload]:
    return {w.id: w for w in parts.source.observe(NOW).workloads}


def writes(cluster: Any, resource: str) -> list[Any]:
    return [
        c for c in cluster.calls if c.resource == resource and c.method in ("PATCH", "PUT", "POST", "DELETE")
    ]


def wakes_on_demand(cluster: Any, name: str, ns: str = "ml") -> None:
    """The owner says something scales the Deployment up from zero (KEDA's HTTP add-on, say)."""
    d = cluster.get("apps", "deployments", ns, name)
    d["metadata"].setdefault("annotations", {})[WAKES_ON_DEMAND_KEY] = "true"
    cluster.put("apps", "deployments", d)


def test_scale_to_zero_writes_the_original_count_in_the_same_write(
    parts: KubernetesParts, cluster: Any
) -> None:
    wakes_on_demand(cluster, "llm-serve")
    w = workloads(parts)["k8s:ml/deployment/llm-serve"]
    ex = parts.executor
    assert ex.supports(w, Level.GRACEFUL_STOP)
    current = ex.current(w)
    assert current is not None
    assert current.incarnation == w.incarnation
    out = ex.execute(stop(w), current)
    assert out.ok, out.detail
    assert out.verified, out.detail
    d = cluster.get("apps", "deployments", "ml", "llm-serve")
    assert d["spec"]["replicas"] == 0
    assert d["metadata"]["annotations"][ORIGINAL_REPLICAS_KEY] == "2"
    assert not cluster.owned_pods("ml", d["metadata"]["uid"])
    assert ex.verify(stop(w), w)
    assert set(out.released_gpu_uuids) == {"GPU-llm-a", "GPU-llm-b"}
    # Idempotent: a second call finds it done and writes nothing.
    before = len(writes(cluster, "deployments"))
    again = ex.execute(stop(w), w)
    assert again.ok
    assert "already" in again.detail
    assert len(writes(cluster, "deployments")) == before
    # Each pod got an Event (events.k8s.io/v1) naming the rule.
    events = cluster.items("events.k8s.io", "events", "ml")
    regarding = {e["regarding"]["name"] for e in events}
    assert regarding == {"llm-serve-5d4ddc985d-fpddz", "llm-serve-5d4ddc985d-x7k2q"}
    assert all(e["reason"] == "IdleAllocation" and e["type"] == "Warning" for e in events)


def test_a_service_that_cannot_wake_on_demand_keeps_its_minimum(parts: KubernetesParts, cluster: Any) -> None:
    w = workloads(parts)["k8s:ml/deployment/llm-serve"]
    assert w.ref[FLOOR_REF] == "1"
    out = parts.executor.execute(stop(w), w)
    assert out.ok, out.detail
    assert out.verified, out.detail
    d = cluster.get("apps", "deployments", "ml", "llm-serve")
    assert d["spec"]["replicas"] == 1
    assert d["metadata"]["annotations"][ORIGINAL_REPLICAS_KEY] == "2"
    left = cluster.owned_pods("ml", d["metadata"]["uid"])
    assert len(left) == 1
    # Only the GPU of the pod that went is given back; the kept pod keeps its own.
    kept = {"llm-serve-5d4ddc985d-fpddz": "GPU-llm-a", "llm-serve-5d4ddc985d-x7k2q": "GPU-llm-b"}
    assert out.released_gpu_uuids == tuple(
        g for p, g in kept.items() if p not in {q["metadata"]["name"] for q in left}
    )
    assert parts.executor.verify(stop(w), w)
    # At its minimum it has nothing left to give back: protected (told, never stopped), with the reason.
    again = workloads(parts)["k8s:ml/deployment/llm-serve"]
    assert again.tag(PROTECT_KEY) == "true"
    assert "its minimum of 1" in again.annotations[PROTECT_REASON_KEY]
    assert WAKES_ON_DEMAND_KEY in again.annotations[PROTECT_REASON_KEY]
    with pytest.raises(PreflightFailed):
        parts.executor.execute(stop(again), again)


def test_min_replicas_annotation_sets_the_floor(parts: KubernetesParts, cluster: Any) -> None:
    d = cluster.get("apps", "deployments", "ml", "llm-serve")
    d["metadata"].setdefault("annotations", {})[MIN_REPLICAS_KEY] = "2"
    cluster.put("apps", "deployments", d)
    w = workloads(parts)["k8s:ml/deployment/llm-serve"]
    assert w.tag(PROTECT_KEY) == "true"  # 2 replicas, floor 2: nothing to give back
    assert "its minimum of 2" in w.annotations[PROTECT_REASON_KEY]


def test_a_409_on_scale_is_retried_with_a_fresh_object(parts: KubernetesParts, cluster: Any) -> None:
    wakes_on_demand(cluster, "llm-serve")
    w = workloads(parts)["k8s:ml/deployment/llm-serve"]
    # Someone else writes the Deployment between our read and our write: a real 409 from a
    # stale resourceVersion, not an injected one.
    real_get = parts.api.get
    raced = []

    def racing_get(res: Any, ns: str, name: str) -> Any:
        reply = real_get(res, ns, name)
        if res[2] == "deployments" and not raced:
            raced.append(1)
            d = cluster.get("apps", "deployments", "ml", "llm-serve")
            d["metadata"].setdefault("labels", {})["touched"] = "yes"
            cluster.put("apps", "deployments", d)
        return reply

    parts.api.get = racing_get  # type: ignore[method-assign]
    out = parts.executor.execute(stop(w), w)
    assert out.ok
    assert parts.executor.conflicts == 1
    patches = [c for c in cluster.calls if c.resource == "deployments" and c.method == "PATCH"]
    assert len(patches) == 2
    d = cluster.get("apps", "deployments", "ml", "llm-serve")
    assert d["spec"]["replicas"] == 0
    assert d["metadata"]["labels"]["touched"] == "yes"


def test_conflicts_are_bounded(parts: KubernetesParts, cluster: Any) -> None:
    w = workloads(parts)["k8s:ml/deployment/llm-serve"]
    cluster.fail("PATCH", r"/deployments/llm-serve$", 409, times=10)
    with pytest.raises(ExecutionError, match="409"):
        parts.executor.execute(stop(w), w)
    assert cluster.get("apps", "deployments", "ml", "llm-serve")["spec"]["replicas"] == 2


def test_429_and_500_fail_the_action_for_the_runner_to_retry(parts: KubernetesParts, cluster: Any) -> None:
    w = workloads(parts)["k8s:ml/deployment/llm-serve"]
    for code in (429, 500):
        cluster.fail("PATCH", r"/deployments/llm-serve$", code, times=1)
        with pytest.raises(ExecutionError, match=f"HTTP {code}"):
            parts.executor.execute(stop(w), w)
    assert parts.executor.execute(stop(w), w).ok


def test_notebook_stops_the_kubeflow_way_and_restores(
    parts: KubernetesParts, cluster: Any, api_client: Any
) -> None:
    w = workloads(parts)["k8s:ml/notebook/alice-nb"]
    out = parts.executor.execute(stop(w), w)
    assert out.ok, out.detail
    assert out.verified, out.detail
    nb = cluster.get("kubeflow.org", "notebooks", "ml", "alice-nb")
    assert KUBEFLOW_STOPPED_KEY in nb["metadata"]["annotations"]
    assert cluster.get("apps", "statefulsets", "ml", "alice-nb")["spec"]["replicas"] == 0
    assert cluster.get("", "pods", "ml", "alice-nb-0") is None
    settings = load_settings(None)
    said = restore_workload(settings.source.kubernetes, "k8s:ml/notebook/alice-nb", client=api_client)
    assert "started notebook" in said
    nb = cluster.get("kubeflow.org", "notebooks", "ml", "alice-nb")
    assert KUBEFLOW_STOPPED_KEY not in nb["metadata"]["annotations"]
    assert ORIGINAL_REPLICAS_KEY not in nb["metadata"]["annotations"]
    assert cluster.get("", "pods", "ml", "alice-nb-0") is not None
    with pytest.raises(ExecutionError, match="did not stop it"):
        restore_workload(settings.source.kubernetes, "ml/notebook/alice-nb", client=api_client)


def test_eviction_honours_the_pdb(parts: KubernetesParts, cluster: Any) -> None:
    w = workloads(parts)["k8s:ml/pod/idle-pod"]
    with pytest.raises(ExecutionError, match="PodDisruptionBudget"):
        parts.executor.execute(stop(w), w)
    assert cluster.get("", "pods", "ml", "idle-pod") is not None
    pdb = cluster.get("policy", "poddisruptionbudgets", "ml", "scratch-pdb")
    pdb["status"]["disruptionsAllowed"] = 1
    cluster.put("policy", "poddisruptionbudgets", pdb)
    out = parts.executor.execute(stop(w), w)
    assert out.ok
    assert out.verified
    assert "grace 30 s" in out.detail
    assert cluster.get("", "pods", "ml", "idle-pod") is None
    evictions = [c for c in cluster.calls if c.subresource == "eviction"]
    assert len(evictions) == 2
    assert parts.executor.current(w) is None  # gone: the runner's pre-flight skips


def test_force_deletes_with_grace_zero_only_where_configured(
    parts: KubernetesParts, api_client: Any, metrics: Any, cluster: Any
) -> None:
    w = workloads(parts)["k8s:ml/pod/idle-pod"]
    out = parts.executor.execute(stop(w, Level.FORCE), w)
    assert out.ok
    assert out.verified
    deletes = [c for c in cluster.calls if c.method == "DELETE" and c.resource == "pods"]
    assert deletes
    assert "gracePeriodSeconds=0" in deletes[0].query
    other = parts_for(api_client, metrics)  # no force_delete_namespaces
    try:
        w2 = {x.id: x for x in other.source.observe(NOW).workloads}["k8s:ml/deployment/llm-serve"]
        assert not other.executor.supports(w2, Level.FORCE)
        with pytest.raises(ExecutionError, match="not configured"):
            other.executor.execute(stop(w2, Level.FORCE), w2)
    finally:
        other.source.close()


def test_protected_and_system_workloads_are_refused(parts: KubernetesParts, cluster: Any) -> None:
    ws = workloads(parts)
    for wid in (
        "k8s:ml/pod/protected-pod",
        "k8s:kube-system/pod/gpu-feature-discovery-x",
        "k8s:gpusteward/pod/agent-debug",
    ):
        with pytest.raises(PreflightFailed):
            parts.executor.execute(stop(ws[wid]), ws[wid])
    assert not [c for c in cluster.calls if c.subresource == "eviction"]


def test_preflight_sees_a_recreated_pod_as_another_workload(parts: KubernetesParts, cluster: Any) -> None:
    w = workloads(parts)["k8s:ml/pod/idle-pod"]
    pod = cluster.remove("", "pods", "ml", "idle-pod")
    pod["metadata"].pop("uid")
    pod["metadata"].pop("resourceVersion")
    cluster.put("", "pods", pod)
    assert parts.executor.current(w) is None


def test_pool_scaler_sets_replicas_through_the_scale_subresource(
    parts: KubernetesParts, cluster: Any
) -> None:
    scaler = parts.scaler
    assert scaler.replicas("ml/deployment/llm-serve") == 2
    assert scaler.replicas("ml/deployment/nope") is None
    assert scaler.replicas("not-a-pool") is None
    cluster.fail("PATCH", r"/deployments/llm-serve/scale$", 409, times=1)
    out = scaler.scale("ml/deployment/llm-serve", 1, "night")
    assert out.ok
    assert out.verified
    assert cluster.get("apps", "deployments", "ml", "llm-serve")["spec"]["replicas"] == 1
    assert scaler.scale("ml/deployment/llm-serve", 1, "night").detail.endswith("already at 1 replicas")
