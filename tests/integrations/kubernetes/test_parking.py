"""L4 parking on Kubernetes against the fake API server: cordon with gpusteward's mark, verify,
uncordon only nodes we cordoned, 409 Conflict re-read and retried."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from k8s_cluster import NODE_1, NODE_2

from gpusteward.domain.errors import ExecutionError, PreflightFailed
from gpusteward.domain.models import Decision, Level
from gpusteward.domain.nodes import PARKED_AT_KEY, PARKED_REASON_KEY
from gpusteward.integrations.kubernetes.kubeapi import KubeApi
from gpusteward.integrations.kubernetes.node_control import KubernetesNodeControl
from gpusteward.runtime.parking_executor import PARK_REASON, NodeParkingExecutor, node_workload

NOW = datetime(2026, 1, 5, 22, 30, tzinfo=UTC)


class FixedClock:
    def now(self) -> datetime:
        return NOW

    def monotonic(self) -> float:
        return 0.0

    def sleep(self, seconds: float) -> None:
        """Never waits."""


def decision(node: str, step: str) -> Decision:
    return Decision(f"node:{node}", NOW, Level.INFRA, step, "idle", idempotency_key=f"node:{node}:{step}")


@pytest.fixture
def control(api_client: Any) -> KubernetesNodeControl:
    return KubernetesNodeControl(KubeApi(api_client, timeout_s=5), conflict_retries=3)


def node_patches(cluster: Any, name: str) -> list[Any]:
    return [
        c for c in cluster.calls if c.resource == "nodes" and c.method == "PATCH" and c.path.endswith(name)
    ]


def test_cordon_with_the_mark_verify_and_uncordon(control: KubernetesNodeControl, cluster: Any) -> None:
    ex = NodeParkingExecutor(control, clock=FixedClock())
    w = node_workload(NODE_1, ["GPU-nb", "GPU-idle"], "kubernetes")
    assert ex.supports(w, Level.INFRA)
    assert not ex.supports(node_workload(NODE_1, [], "slurm"), Level.INFRA)
    assert ex.current(w) == w
    assert control.unschedulable() == {}

    out = ex.execute(decision(NODE_1, "park-node"), w)
    assert out.ok, out.detail
    assert out.verified
    n = cluster.get("", "nodes", "", NODE_1)
    assert n["spec"]["unschedulable"] is True
    assert n["metadata"]["annotations"][PARKED_AT_KEY] == "2026-01-05T22:30:00Z"
    assert n["metadata"]["annotations"][PARKED_REASON_KEY] == PARK_REASON
    # The cordon and its mark are one write, made against the resourceVersion just read.
    (patch,) = node_patches(cluster, NODE_1)
    assert patch.verb == "patch"
    (state,) = control.unschedulable().values()
    assert (state.name, state.parked, state.ours, state.parked_at) == (NODE_1, True, True, NOW)
    assert ex.verify(decision(NODE_1, "park-node"), w)
    # Idempotent: a second park writes nothing.
    assert "already parked" in ex.execute(decision(NODE_1, "park-node"), w).detail
    assert len(node_patches(cluster, NODE_1)) == 1

    out = ex.execute(decision(NODE_1, "unpark-node"), w)
    assert out.ok, out.detail
    assert out.verified
    n = cluster.get("", "nodes", "", NODE_1)
    assert "unschedulable" not in n["spec"]
    assert PARKED_AT_KEY not in n["metadata"]["annotations"]
    assert PARKED_REASON_KEY not in n["metadata"]["annotations"]
    assert control.unschedulable() == {}


def test_a_node_someone_else_cordoned_is_never_uncordoned_nor_marked(
    control: KubernetesNodeControl, cluster: Any
) -> None:
    n = cluster.get("", "nodes", "", NODE_2)
    n["spec"]["unschedulable"] = True
    cluster.put("", "nodes", n)
    ex = NodeParkingExecutor(control, clock=FixedClock())
    w = node_workload(NODE_2, ["GPU-llm-a"], "kubernetes")
    st = control.unschedulable()[NODE_2]
    assert st.parked
    assert not st.ours
    with pytest.raises(PreflightFailed, match="left alone"):
        ex.execute(decision(NODE_2, "unpark-node"), w)
    with pytest.raises(PreflightFailed, match="left alone"):
        ex.execute(decision(NODE_2, "park-node"), w)
    assert node_patches(cluster, NODE_2) == []
    assert cluster.get("", "nodes", "", NODE_2)["spec"]["unschedulable"] is True


def test_a_conflict_is_read_again_and_retried_then_given_up(
    control: KubernetesNodeControl, cluster: Any
) -> None:
    cluster.fail("PATCH", rf"/api/v1/nodes/{NODE_1}$", 409, times=2)
    assert "cordoned" in control.park(NODE_1, PARK_REASON, NOW)
    assert len(node_patches(cluster, NODE_1)) == 3
    assert cluster.get("", "nodes", "", NODE_1)["spec"]["unschedulable"] is True
    cluster.fail("PATCH", rf"/api/v1/nodes/{NODE_1}$", 409, times=10)
    with pytest.raises(ExecutionError, match="409 Conflict after 3 retries"):
        control.unpark(NODE_1)
    assert cluster.get("", "nodes", "", NODE_1)["spec"]["unschedulable"] is True


def test_an_unknown_node_is_gone(control: KubernetesNodeControl) -> None:
    ex = NodeParkingExecutor(control)
    w = node_workload("no-such-node", [], "kubernetes")
    assert control.state("no-such-node") is None
    assert ex.current(w) is None
