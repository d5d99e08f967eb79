"""The live false-kill figure through the real tick against the fake API server: two idle
Deployments are scaled to zero; the owner of one scales it back up (through the API server, as
``kubectl scale`` would), and that one, only, is a suspected false kill."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from k8s_cluster import NODE_1, deployment, gpu_pod, node
from k8s_fakeapi import FakeCluster

from conftest import ScriptedMetrics, client_for
from gpusteward.domain.integration import Integration
from gpusteward.domain.models import ActionStatus
from gpusteward.integrations.kubernetes.build import build_kubernetes
from gpusteward.integrations.kubernetes.scale_floor import WAKES_ON_DEMAND_KEY
from gpusteward.integrations.sim import SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.registry import build_context
from gpusteward.runtime.rollout import RolloutBook

#: Flags an idle GPU at once: the ladder fits in a few ticks.
RULES = "rules:\n  - name: idle-now\n    kind: idle\n    action: reclaim\n    when: last(gpu_util_pct) < 5\n"
APPS = ("trainer", "evaluator")


@pytest.fixture
def cluster() -> FakeCluster:
    c = FakeCluster()
    c.put("", "nodes", node(NODE_1))
    for app in APPS:
        d, rs = deployment(app, "ml", 1)
        # Scaled to zero only because something wakes it (a Deployment at its minimum is only told).
        d["metadata"].setdefault("annotations", {})[WAKES_ON_DEMAND_KEY] = "true"
        c.put("apps", "deployments", d)
        c.put("apps", "replicasets", rs)
        pod = gpu_pod("pod1.json", f"{app}-5d4ddc985d-aaaaa", "ml", rs, labels={"app": app})
        c.templates[("apps/deployments", "ml", app)] = copy.deepcopy(pod)
        c.put("", "pods", pod)
    return c


@pytest.fixture
def metrics() -> ScriptedMetrics:
    return ScriptedMetrics(
        {f"GPU-{a}": ("ml", f"{a}-5d4ddc985d-aaaaa") for a in APPS},
        {f"GPU-{a}": 0.0 for a in APPS},
        {f"GPU-{a}": NODE_1 for a in APPS},
    )


def _follow(metrics: ScriptedMetrics, cluster: FakeCluster) -> None:
    """dcgm-exporter's labels: a GPU is held by the pod of its app that runs now, or by none."""
    for uuid in list(metrics.util):
        app = uuid.removeprefix("GPU-")
        pods = [
            p["metadata"]["name"]
            for p in cluster.items("", "pods", "ml")
            if p["metadata"]["name"].startswith(app)
        ]
        if pods:
            metrics.holders[uuid] = ("ml", pods[0])
        else:
            metrics.holders.pop(uuid, None)


def test_a_deployment_scaled_back_up_by_its_owner_is_a_suspected_false_kill(
    tmp_path: Path, server: Any, cluster: FakeCluster, metrics: ScriptedMetrics
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    settings = load_settings(
        None,
        mode="enforce",
        tick_seconds=60,
        store={"url": f"sqlite:///{tmp_path / 'state.db'}"},
        source={"name": "kubernetes", "kubernetes": {"agent_namespace": "gpusteward", "resync_seconds": 60}},
        rules={"use_default_pack": False, "files": [str(rules)]},
        policy={
            "ladder": {"warn_again_after_minutes": 0, "graceful_stop_after_minutes": 0},
            "startup_grace_minutes": 0,
            "budget": {"max_actions_per_hour": 100, "max_gpu_share_per_hour": 1.0},
        },
    )
    # The fake API server stamps a new pod with the wall clock: the agent's clock starts an hour
    # behind it, so the owner's scale-up comes after the stops the agent recorded.
    clock = SimClock(datetime.now(tz=UTC) - timedelta(hours=1))
    client = client_for(server.url)
    parts = build_kubernetes(
        settings.source.kubernetes, build_context(settings, clock, metrics=metrics), client=client
    )
    notifier = MemoryNotifier()
    steward, _ = build_steward(
        settings,
        clock=clock,
        notifier=notifier,
        integration=Integration("kubernetes", parts.source, [parts.executor], wrap_notifier=parts.notifier),
    )
    book = RolloutBook(steward.store, settings.policy)
    wid = {a: f"k8s:ml/deployment/{a}" for a in APPS}

    def tick(done: Any, limit: int) -> None:
        for _ in range(limit):
            steward.tick()
            clock.sleep(60)
            _follow(metrics, cluster)
            want = cluster.last_rv("", "pods")
            assert parts.source.pods.wait_for(
                lambda _, want=want: int(parts.source.pods.resource_version or 0) >= want, 30
            )
            if done():
                return

    try:
        tick(lambda: len(book.watch().stops) == len(APPS), 15)
        for a in APPS:
            d = cluster.get("apps", "deployments", "ml", a)
            assert d["spec"]["replicas"] == 0, a
            stops = [x for x in steward.store.actions(workload_id=wid[a]) if x.step == "graceful-stop"]
            assert [x.status for x in stops] == [ActionStatus.SUCCEEDED]
        assert sorted(s.workload_id for s in book.watch().stops) == sorted(wid.values())
        assert book.false_kills() == []

        # The trainer's owner scales it back up through the API server; the evaluator stays down.
        from kubernetes import client as k8s

        k8s.AppsV1Api(client_for(server.url)).patch_namespaced_deployment_scale(
            "trainer", "ml", {"spec": {"replicas": 1}}
        )
        assert cluster.get("apps", "deployments", "ml", "trainer")["spec"]["replicas"] == 1
        metrics.util["GPU-trainer"] = 90.0  # busy again: it is not stopped a second time

        tick(lambda: bool(book.false_kills()), 3)
        [fk] = book.false_kills()
        assert fk.workload_id == wid["trainer"]
        assert fk.why.startswith("resubmitted as k8s:ml/deployment/trainer ")
        assert fk.status == "suspected"
        told = [n for n in notifier.sent if n.owner is None and n.dedup_key == f"false-kill:{fk.id}"]
        assert len(told) == 1
        tick(lambda: False, 2)
        assert [f.workload_id for f in book.false_kills()] == [wid["trainer"]]
    finally:
        parts.source.close()
        client.close()
