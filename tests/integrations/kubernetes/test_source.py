"""The kubernetes source against the fake API server: owner chains, the metrics join, the watch."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpusteward.domain.errors import SourceError
from gpusteward.domain.models import PROTECT_KEY
from gpusteward.domain.ports import SystemClock
from gpusteward.integrations.kubernetes.build import KubernetesParts, build_kubernetes
from gpusteward.integrations.kubernetes.model import OWNER_CHAIN_KEY, PROTECT_REASON_KEY
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.registry import build_context

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def parts_for(api_client: Any, metrics: Any, **cfg: Any) -> KubernetesParts:
    settings = load_settings(
        None, source={"name": "kubernetes", "kubernetes": {"agent_namespace": "gpusteward", **cfg}}
    )
    ctx = build_context(settings, SystemClock(), metrics=metrics)
    return build_kubernetes(settings.source.kubernetes, ctx, client=api_client)


@pytest.fixture
def parts(api_client: Any, metrics: Any) -> Any:
    p = parts_for(api_client, metrics)
    yield p
    p.source.close()


def caught_up(parts: KubernetesParts, server: Any) -> None:
    """Wait (hang guard only) until the pod cache has seen the server's newest pod event."""
    want = server.cluster.last_rv("", "pods")
    assert parts.source.pods.wait_for(lambda _: int(parts.source.pods.resource_version or 0) >= want, 30)


def test_pods_become_workloads_by_their_unit(parts: KubernetesParts) -> None:
    obs = parts.source.observe(NOW)
    by_id = {w.id: w for w in obs.workloads}
    assert set(by_id) == {
        "k8s:ml/notebook/alice-nb",
        "k8s:ml/deployment/llm-serve",
        "k8s:ml/pod/idle-pod",
        "k8s:ml/pod/protected-pod",
        "k8s:kube-system/pod/gpu-feature-discovery-x",
        "k8s:gpusteward/pod/agent-debug",
    }
    nb = by_id["k8s:ml/notebook/alice-nb"]
    assert nb.gpu_uuids == ("GPU-nb",)
    assert nb.owner.user == "alice@example.com"
    assert nb.owner.contact == "alice@example.com"
    assert nb.owner.team == "ml"
    assert nb.ref["mode"] == "notebook"
    assert nb.ref["plural"] == "notebooks"
    assert nb.annotations[OWNER_CHAIN_KEY] == "Pod/alice-nb-0 <- StatefulSet/alice-nb <- Notebook/alice-nb"
    llm = by_id["k8s:ml/deployment/llm-serve"]
    assert llm.gpu_uuids == ("GPU-llm-a", "GPU-llm-b")
    assert llm.gpus_requested == 2
    assert llm.ref["mode"] == "scale"
    assert "ReplicaSet/llm-serve-5d4ddc985d" in llm.annotations[OWNER_CHAIN_KEY]
    assert by_id["k8s:ml/pod/idle-pod"].ref["mode"] == "evict"
    assert by_id["k8s:ml/pod/protected-pod"].tag(PROTECT_KEY) == "true"
    for wid, why in (
        ("k8s:kube-system/pod/gpu-feature-discovery-x", "never touched"),
        ("k8s:gpusteward/pod/agent-debug", "gpusteward's own"),
    ):
        assert by_id[wid].tag(PROTECT_KEY) == "true"
        assert why in by_id[wid].annotations[PROTECT_REASON_KEY]
    assert obs.samples
    assert {g.uuid for g in obs.gpus} >= set(nb.gpu_uuids)


def test_namespace_lists_protect(api_client: Any, metrics: Any) -> None:
    p = parts_for(api_client, metrics, namespaces=["research"])
    try:
        obs = p.source.observe(NOW)
        assert all(w.tag(PROTECT_KEY) == "true" for w in obs.workloads)
    finally:
        p.source.close()


def test_unmeasured_gpus_get_placeholders(parts: KubernetesParts, metrics: Any) -> None:
    del metrics.holders["GPU-llm-b"]
    w = {w.id: w for w in parts.source.observe(NOW).workloads}["k8s:ml/deployment/llm-serve"]
    assert len(w.gpu_uuids) == 2
    assert "GPU-llm-a" in w.gpu_uuids
    assert any(u.startswith("k8s:gpu-node-2:") for u in w.gpu_uuids)


def test_join_by_pod_uid_wins_over_the_name(parts: KubernetesParts, metrics: Any, cluster: Any) -> None:
    from gpusteward.domain.models import Observation, Workload, WorkloadKind

    uid = cluster.get("", "pods", "ml", "idle-pod")["metadata"]["uid"]
    base = metrics.observe

    def with_uid(now: datetime) -> Observation:
        obs = base(now)
        extra = Workload(
            "pod/uid-only",
            WorkloadKind.POD,
            "x",
            obs.workloads[0].owner,
            1,
            ("GPU-by-uid",),
            now,
            ref={"pod_uid": uid},
        )
        return Observation(obs.at, obs.gpus, obs.samples, (*obs.workloads, extra))

    metrics.observe = with_uid
    w = {w.id: w for w in parts.source.observe(NOW).workloads}["k8s:ml/pod/idle-pod"]
    assert w.gpu_uuids == ("GPU-by-uid",)


def test_watch_sees_changes_without_listing_again(parts: KubernetesParts, server: Any, cluster: Any) -> None:
    parts.source.observe(NOW)
    lists = parts.source.pods.lists
    cluster.remove("", "pods", "ml", "idle-pod")
    caught_up(parts, server)
    ids = {w.id for w in parts.source.observe(NOW).workloads}
    assert "k8s:ml/pod/idle-pod" not in ids
    assert parts.source.pods.lists == lists  # the watch, not a list, brought the delete


def test_410_gone_lists_again(parts: KubernetesParts, cluster: Any) -> None:
    parts.source.observe(NOW)
    lists = parts.source.pods.lists
    cluster.compact()  # ends the open watch; resuming from its resourceVersion is 410 Gone
    cluster.remove("", "pods", "ml", "protected-pod")
    assert parts.source.pods.wait_for(
        lambda objs: all(o["metadata"]["name"] != "protected-pod" for o in objs), 30
    )
    assert parts.source.pods.lists > lists
    ids = {w.id for w in parts.source.observe(NOW).workloads}
    assert "k8s:ml/pod/protected-pod" not in ids
    assert "k8s:ml/pod/idle-pod" in ids


def test_a_failing_metric_source_fails_the_observation(parts: KubernetesParts, metrics: Any) -> None:
    metrics.fail = "prometheus down"
    with pytest.raises(SourceError, match="prometheus down"):
        parts.source.observe(NOW)


def test_an_unreachable_api_server_fails_the_observation(metrics: Any) -> None:
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # discard port: nothing listens
    p = parts_for(client.ApiClient(cfg), metrics, request_timeout_seconds=1)
    try:
        with pytest.raises(SourceError, match="pods"):
            p.source.observe(NOW)
    finally:
        p.source.close()


def test_api_500_on_list_marks_the_cache_failing(api_client: Any, metrics: Any, cluster: Any) -> None:
    cluster.fail("GET", r"^/api/v1/pods$", 500, times=1)
    p = parts_for(api_client, metrics)
    try:
        with pytest.raises(SourceError, match="HTTP 500"):
            p.source.observe(NOW)
        # The cache retries (1 s backoff) and recovers on its own.
        assert p.source.pods.wait_for(lambda objs: len(objs) > 0, 30)
        assert p.source.observe(NOW).workloads
    finally:
        p.source.close()
