"""Opt-in: the source, executor and Lease against a real cluster from ``KUBECONFIG``.

Runs only with ``GPUSTEWARD_LIVE_K8S=1`` and ``KUBECONFIG`` set (``pytest -m kubernetes_live``).
It creates a namespace ``gpusteward-live-<random>`` with a 1-replica Deployment whose pod asks
for no GPU (so it works on any cluster), a Lease, and deletes the namespace at the end. Your
credentials need to create namespaces, deployments and leases there.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gpusteward.domain.models import Decision, Level, Owner, Workload, WorkloadKind
from gpusteward.domain.ports import SystemClock
from gpusteward.integrations.kubernetes.build import build_kubernetes, restore_workload
from gpusteward.integrations.kubernetes.control import ORIGINAL_REPLICAS_KEY
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.registry import build_context

from .k8s_cluster import lease_for

pytestmark = [
    pytest.mark.kubernetes_live,
    pytest.mark.skipif(
        os.environ.get("GPUSTEWARD_LIVE_K8S") != "1" or not os.environ.get("KUBECONFIG"),
        reason="set GPUSTEWARD_LIVE_K8S=1 and KUBECONFIG to run against a real cluster",
    ),
]


@pytest.fixture
def live() -> Iterator[tuple[Any, str]]:
    from kubernetes import client, config

    api_client = config.new_client_from_config()
    ns = f"gpusteward-live-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": ns}})
    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": "idle"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "idle"}},
                "template": {
                    "metadata": {"labels": {"app": "idle"}},
                    "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]},
                },
            },
        },
    )
    try:
        yield api_client, ns
    finally:
        core.delete_namespace(ns)
        api_client.close()


def test_scale_restore_and_lease_on_a_real_cluster(live: tuple[Any, str]) -> None:
    api_client, ns = live
    settings = load_settings(None, ha={"lease_namespace": ns})
    ctx = build_context(settings, SystemClock(), metrics=_NoMetrics())
    parts = build_kubernetes(settings.source.kubernetes, ctx, client=api_client)
    w = Workload(
        f"k8s:{ns}/deployment/idle",
        WorkloadKind.POD,
        "deployment/idle",
        Owner("live"),
        0,
        (),
        datetime.now(tz=UTC),
        source="kubernetes",
        ref={
            "namespace": ns,
            "kind": "Deployment",
            "name": "idle",
            "group": "apps",
            "version": "v1",
            "plural": "deployments",
            "mode": "scale",
            "pods": "",
        },
    )
    d = Decision(
        w.id, datetime.now(tz=UTC), Level.GRACEFUL_STOP, "graceful-stop", "live test", idempotency_key="x"
    )
    assert parts.executor.execute(d, w).ok
    dep = parts.api.get(("apps", "v1", "deployments", True), ns, "idle").body
    assert dep["spec"]["replicas"] == 0
    assert dep["metadata"]["annotations"][ORIGINAL_REPLICAS_KEY] == "1"
    assert "back to 1" in restore_workload(
        settings.source.kubernetes, f"{ns}/deployment/idle", client=api_client
    )
    a = lease_for(settings, client=api_client)
    b = lease_for(settings, client=api_client)
    assert a.acquire()
    assert not b.acquire()
    a.release()
    time.sleep(0.5)
    assert b.acquire()


class _NoMetrics:
    name = "none"

    def observe(self, now: datetime) -> Any:
        raise AssertionError("not used")

    def close(self) -> None:
        """Nothing."""
