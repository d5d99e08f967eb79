"""Consolidation moves against the fake API server: a Deployment moved to the device plugin's
shared resource (time-slicing, MIG) with its original GPU request recorded on it, one move at a
time, rolled back on contention, restored."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from k8s_cluster import deployment, node
from k8s_fakeapi import FakeCluster
from test_cli_restore import config_for
from typer.testing import CliRunner

from conftest import client_for
from gpusteward.cli.main import app
from gpusteward.domain.errors import ExecutionError, PreflightFailed
from gpusteward.domain.models import (
    ActionStatus,
    ApprovalStatus,
    Decision,
    Hold,
    Level,
    Owner,
    Workload,
    WorkloadKind,
)
from gpusteward.integrations.kubernetes.consolidate import (
    GPU,
    ORIGINAL_GPU_KEY,
    SHARED_AS_KEY,
    ConsolidationExecutor,
    ConsolidationMover,
)
from gpusteward.integrations.kubernetes.control import DEPLOYMENTS
from gpusteward.integrations.kubernetes.kubeapi import KubeApi
from gpusteward.integrations.sim import SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.policy.approval import hold_for_approval
from gpusteward.policy.consolidation import SHARE, UNSHARE, share_key, unshare_key
from gpusteward.policy.settings import ApprovalSettings
from gpusteward.runtime.owner_controls import decide_approval
from gpusteward.runtime.runner import ActionRunner
from gpusteward.store.memory import MemoryStore

SHARED = "nvidia.com/gpu.shared"  # time-slicing with renameByDefault: true
MIG = "nvidia.com/mig-1g.10gb"  # the mixed MIG strategy


def with_gpu(cluster: FakeCluster, name: str) -> None:
    """A Deployment in ml whose container asks for one whole GPU (limit and request)."""
    d = cluster.get("apps", "deployments", "ml", name)
    if d is None:
        d, _ = deployment(name, "ml", 1)
    c = d["spec"]["template"]["spec"]["containers"][0]
    c["resources"] = {"limits": {GPU: "1", "cpu": "2"}, "requests": {GPU: "1", "cpu": "1"}}
    cluster.put("apps", "deployments", d)


def sharing_node(cluster: FakeCluster) -> None:
    n = node("gpu-node-shared", gpus=0)
    n["status"]["allocatable"] = {**n["status"]["allocatable"], SHARED: "16", MIG: "7"}
    n["status"]["capacity"] = dict(n["status"]["allocatable"])
    cluster.put("", "nodes", n)


def resources(cluster: FakeCluster, name: str) -> dict[str, Any]:
    d = cluster.get("apps", "deployments", "ml", name)
    assert d is not None
    res: dict[str, Any] = d["spec"]["template"]["spec"]["containers"][0]["resources"]
    return res


def meta(cluster: FakeCluster, name: str) -> dict[str, Any]:
    d = cluster.get("apps", "deployments", "ml", name)
    assert d is not None
    m: dict[str, Any] = d["metadata"]
    return m


@pytest.fixture
def ex(api_client: Any, cluster: FakeCluster) -> ConsolidationExecutor:
    with_gpu(cluster, "llm-serve")
    with_gpu(cluster, "embed-serve")
    return ConsolidationExecutor(KubeApi(api_client), watch_s=600, contention_share_max=0.01)


def test_refused_where_no_node_offers_the_shared_resource(
    ex: ConsolidationExecutor, cluster: FakeCluster
) -> None:
    with pytest.raises(PreflightFailed, match="no node advertises"):
        ex.share(DEPLOYMENTS, "ml", "llm-serve", SHARED, now_s=0)
    with pytest.raises(PreflightFailed, match="not a shared GPU resource"):
        ex.share(DEPLOYMENTS, "ml", "llm-serve", GPU, now_s=0)
    assert resources(cluster, "llm-serve")["limits"][GPU] == "1"


def test_share_records_the_original_then_rolls_back_on_contention(
    ex: ConsolidationExecutor, cluster: FakeCluster
) -> None:
    sharing_node(cluster)
    said = ex.share(DEPLOYMENTS, "ml", "llm-serve", SHARED, now_s=0)
    assert SHARED in said
    r = resources(cluster, "llm-serve")
    assert r["limits"] == {SHARED: "1", "cpu": "2"}
    assert r["requests"] == {SHARED: "1", "cpu": "1"}
    ann = meta(cluster, "llm-serve")["annotations"]
    assert ann[SHARED_AS_KEY] == SHARED
    assert GPU in ann[ORIGINAL_GPU_KEY]
    # A second call finds it done and writes nothing.
    rv = meta(cluster, "llm-serve")["resourceVersion"]
    assert "already" in ex.share(DEPLOYMENTS, "ml", "llm-serve", SHARED, now_s=1)
    assert meta(cluster, "llm-serve")["resourceVersion"] == rv
    # One workload at a time: the next waits for the watch to end.
    with pytest.raises(PreflightFailed, match="one move at a time"):
        ex.share(DEPLOYMENTS, "ml", "embed-serve", SHARED, now_s=60)
    assert ex.watch(0.0, now_s=120) == "watching"
    # Contention over the bound: the move is undone, the original request is back.
    assert ex.watch(0.05, now_s=180) == "rolled-back"
    r = resources(cluster, "llm-serve")
    assert r["limits"] == {GPU: "1", "cpu": "2"}
    assert r["requests"] == {GPU: "1", "cpu": "1"}
    ann = meta(cluster, "llm-serve").get("annotations") or {}
    assert ORIGINAL_GPU_KEY not in ann
    assert SHARED_AS_KEY not in ann
    with pytest.raises(ExecutionError, match="did not move it"):
        ex.restore(DEPLOYMENTS, "ml", "llm-serve")
    # The trial is over: the next workload may move.
    assert MIG in ex.share(DEPLOYMENTS, "ml", "embed-serve", MIG, now_s=200)


def test_a_clean_watch_keeps_the_move_and_restore_undoes_it(
    ex: ConsolidationExecutor, cluster: FakeCluster
) -> None:
    sharing_node(cluster)
    ex.share(DEPLOYMENTS, "ml", "llm-serve", MIG, now_s=0)
    assert resources(cluster, "llm-serve")["limits"][MIG] == "1"
    assert ex.watch(0.005, now_s=300) == "watching"  # under the bound
    assert ex.watch(0.0, now_s=600) == "kept"
    assert resources(cluster, "llm-serve")["limits"][MIG] == "1"
    assert "whole GPUs again" in ex.restore(DEPLOYMENTS, "ml", "llm-serve")
    assert resources(cluster, "llm-serve")["limits"] == {GPU: "1", "cpu": "2"}


def test_restore_command_undoes_a_consolidation_move(
    tmp_path: Path, server: Any, cluster: FakeCluster
) -> None:
    with_gpu(cluster, "llm-serve")
    sharing_node(cluster)
    ConsolidationExecutor(KubeApi(client_for(server.url))).share(
        DEPLOYMENTS, "ml", "llm-serve", SHARED, now_s=0
    )
    assert resources(cluster, "llm-serve")["limits"][SHARED] == "1"
    cfg = config_for(tmp_path, server.url)
    result = CliRunner().invoke(
        app, ["restore", "k8s:ml/deployment/llm-serve", "--config", str(cfg), "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["restored"] is True
    assert "whole GPUs again" in out["detail"]
    assert resources(cluster, "llm-serve")["limits"] == {GPU: "1", "cpu": "2"}
    assert ORIGINAL_GPU_KEY not in (meta(cluster, "llm-serve").get("annotations") or {})
    again = CliRunner().invoke(app, ["restore", "ml/deployment/llm-serve", "--config", str(cfg)])
    assert again.exit_code == 1


def _deployment_workload(name: str) -> Workload:
    ref = {"namespace": "ml", "kind": "Deployment", "name": name, "group": "apps", "version": "v1"}
    ref |= {"plural": "deployments", "mode": "scale"}
    return Workload(
        f"k8s:ml/deployment/{name}",
        WorkloadKind.POD,
        name,
        Owner("ml", "ml"),
        1,
        ("GPU-1",),
        datetime(2026, 1, 5, tzinfo=UTC),
        "kubernetes",
        ref=MappingProxyType(ref),
    )


def test_the_mover_through_the_runner_waits_for_approval_moves_once_and_rolls_back(
    api_client: Any, cluster: FakeCluster
) -> None:
    with_gpu(cluster, "llm-serve")
    sharing_node(cluster)
    clock = SimClock(datetime(2026, 1, 5, tzinfo=UTC))
    store = MemoryStore()
    mover = ConsolidationMover(KubeApi(api_client), lambda w: w, clock=clock)
    runner = ActionRunner(store, [mover], MemoryNotifier(), clock, dry_run=False, approval=ApprovalSettings())
    w = _deployment_workload("llm-serve")
    store.remember_workloads([w], clock.now())  # as the tick does: approvals name known workloads
    key = share_key(w.id, w.incarnation, SHARED)
    share = Decision(
        w.id, clock.now(), Level.INFRA, SHARE.name, "light", rule="consolidation", idempotency_key=key
    )
    held = hold_for_approval([share], {}, clock.now(), ApprovalSettings())
    assert held[0].hold is Hold.AWAITING_APPROVAL
    runner.run(held, {w.id: w})
    assert resources(cluster, "llm-serve")["limits"][GPU] == "1", "nothing moves before an approval"
    (asked,) = store.approvals(ApprovalStatus.PENDING)
    decide_approval(store, asked.id, approve=True, by="admin", reason="try", now=clock.now())
    (done,) = runner.run([share], {w.id: w})
    assert done.status is ActionStatus.SUCCEEDED
    assert resources(cluster, "llm-serve")["limits"][SHARED] == "1"
    runner.run([share], {w.id: w})  # the key has run: never twice
    assert [a.step for a in store.actions(limit=10)] == [SHARE.name]
    back = Decision(
        w.id,
        clock.now(),
        Level.INFRA,
        UNSHARE.name,
        "contended",
        rule="consolidation",
        idempotency_key=unshare_key(w.id, clock.now()),
    )
    assert hold_for_approval([back], {}, clock.now(), ApprovalSettings())[0].hold is Hold.NONE
    (undone,) = runner.run([back], {w.id: w})
    assert undone.status is ActionStatus.SUCCEEDED
    assert resources(cluster, "llm-serve")["limits"] == {GPU: "1", "cpu": "2"}
