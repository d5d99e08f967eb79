"""The issue's scenario through the real loop, two replicas, against the fake API server.

An idle Notebook is scaled to zero (Kubeflow's way) and restored; a busy Deployment is
untouched; a protected pod is untouched; a bare idle pod is evicted once its PodDisruptionBudget
allows it; only the Lease holder acts, and when it goes away the other replica continues the
ladder from the shared database (no warning sent twice).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conftest import client_for
from gpusteward.domain.integration import Integration
from gpusteward.domain.models import ActionStatus
from gpusteward.integrations.kubernetes.build import build_kubernetes, lease_leadership
from gpusteward.integrations.sim import SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.registry import build_context

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


class Replica:
    def __init__(
        self, name: str, url: str, settings: Any, clock: SimClock, metrics: Any, notifier: Any
    ) -> None:
        self.client = client_for(url, agent=f"gpusteward/{name}")
        ctx = build_context(settings, clock, metrics=metrics)
        self.parts = build_kubernetes(settings.source.kubernetes, ctx, client=self.client)
        self.steward, _ = build_steward(
            settings,
            clock=clock,
            notifier=notifier,
            # As integrations.kubernetes.build makes them, with this replica's client.
            integration=Integration(
                "kubernetes", self.parts.source, [self.parts.executor], wrap_notifier=self.parts.notifier
            ),
        )
        # The loop asks this Lease each tick whether to decide and act (runtime/loop.py).
        ha = settings.ha
        self.lease = lease_leadership(
            settings.source.kubernetes,
            ha.lease_namespace,
            ha.lease_name,
            ha.lease_seconds,
            client=self.client,
            clock=clock,
        )
        self.steward.leadership = self.lease
        self.ticks = 0

    def step(self) -> bool:
        report = self.steward.tick()
        self.ticks += report.leader
        return report.leader

    def close(self) -> None:
        self.parts.source.close()
        self.client.close()


def sync_metrics(metrics: Any, cluster: Any) -> None:
    """A GPU whose pod is gone is free: the exporter no longer labels it with that pod."""
    for uuid, (ns, pod) in list(metrics.holders.items()):
        if cluster.get("", "pods", ns, pod) is None:
            del metrics.holders[uuid]
            metrics.util.pop(uuid, None)


def test_scenario(tmp_path: Path, server: Any, cluster: Any, metrics: Any) -> None:
    settings = load_settings(
        None,
        mode="enforce",
        tick_seconds=60,
        store={"url": f"sqlite:///{tmp_path / 'state.db'}"},
        source={"name": "kubernetes", "kubernetes": {"agent_namespace": "gpusteward", "resync_seconds": 60}},
        ha={"lease_namespace": "gpusteward", "lease_seconds": 15},
        policy={"budget": {"max_actions_per_hour": 100, "max_gpu_share_per_hour": 1.0}},
    )
    clock = SimClock(T0)
    inbox = MemoryNotifier()
    a = Replica("a", server.url, settings, clock, metrics, inbox)
    b = Replica("b", server.url, settings, clock, metrics, inbox)
    try:
        handed_over_at = None
        # The notebook (interactive) is warned after 2 idle hours and stopped 30 min later; the
        # bare idle pod (no owner: judged on behaviour) after 3.5 quiet hours.
        for minute in range(330):
            leaders = [r for r in (a, b) if r.step()]
            assert len(leaders) <= 1  # never two acting replicas in one tick
            if minute == 130:
                # Replica a shuts down in the middle of the ladders (warned, not yet stopped).
                a.lease.release()
                a_calls = len(cluster.calls)
                handed_over_at = minute
                a.step = lambda: False  # type: ignore[method-assign]
            if minute == 270:
                pdb = cluster.get("policy", "poddisruptionbudgets", "ml", "scratch-pdb")
                pdb["status"]["disruptionsAllowed"] = 1
                cluster.put("policy", "poddisruptionbudgets", pdb)
            clock.sleep(60)
            sync_metrics(metrics, cluster)
            for r in (a, b):
                want = cluster.last_rv("", "pods")
                assert r.parts.source.pods.wait_for(
                    lambda _, r=r, want=want: int(r.parts.source.pods.resource_version or 0) >= want, 30
                )
        assert handed_over_at is not None
        assert a.ticks > 0
        assert b.ticks > 0

        # Writes after the handover came from b only; before it, from a only.
        writes = [
            c for c in cluster.calls if c.method in ("PATCH", "POST", "DELETE") and c.resource != "leases"
        ]
        assert writes
        assert all(c.agent == "gpusteward/a" for c in writes if cluster.calls.index(c) < a_calls)
        assert all(c.agent == "gpusteward/b" for c in writes if cluster.calls.index(c) >= a_calls)

        # The idle Notebook: stopped the Kubeflow way, pod gone.
        nb = cluster.get("kubeflow.org", "notebooks", "ml", "alice-nb")
        assert "kubeflow-resource-stopped" in nb["metadata"]["annotations"]
        assert cluster.get("", "pods", "ml", "alice-nb-0") is None
        # The busy Deployment: untouched.
        d = cluster.get("apps", "deployments", "ml", "llm-serve")
        assert d["spec"]["replicas"] == 2
        assert "gpusteward.io/original-replicas" not in d["metadata"]["annotations"]
        assert not [c for c in writes if "llm-serve" in c.path and c.resource != "events"]
        # The protected pod, kube-system and the agent's own namespace: untouched.
        for ns, pod in (
            ("ml", "protected-pod"),
            ("kube-system", "gpu-feature-discovery-x"),
            ("gpusteward", "agent-debug"),
        ):
            assert cluster.get("", "pods", ns, pod) is not None
            assert not [c for c in writes if f"/pods/{pod}" in c.path]
        # The bare idle pod: eviction refused by its PDB (429) until it allowed one, then evicted.
        evictions = [c for c in cluster.calls if c.subresource == "eviction"]
        assert len(evictions) >= 2
        assert cluster.get("", "pods", "ml", "idle-pod") is None

        store = b.steward.store
        actions = store.actions(limit=200)
        by = {(x.workload_id, x.step): x for x in actions}
        assert by[("k8s:ml/notebook/alice-nb", "graceful-stop")].status is ActionStatus.SUCCEEDED
        assert by[("k8s:ml/pod/idle-pod", "graceful-stop")].status is ActionStatus.SUCCEEDED
        assert not [x for x in actions if x.workload_id in ("k8s:ml/deployment/llm-serve",)]
        assert not [
            x for x in actions if x.workload_id == "k8s:ml/pod/protected-pod" and x.step == "graceful-stop"
        ]
        # The ladder went on across the handover: each warning once.
        warns = [
            x for x in actions if x.workload_id == "k8s:ml/notebook/alice-nb" and x.step.startswith("warn")
        ]
        assert sorted(x.step for x in warns) == ["warn-1", "warn-2"]
        # L1 went to the owner and as an Event on the pod.
        assert any(n.workload_id == "k8s:ml/notebook/alice-nb" for n in inbox.sent)
        notes = [
            e
            for e in cluster.items("events.k8s.io", "events", "ml")
            if e["regarding"]["name"] == "alice-nb-0"
        ]
        assert {e["action"] for e in notes} >= {"Notify", "Stop"}
    finally:
        a.close()
        b.close()
