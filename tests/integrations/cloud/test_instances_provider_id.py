"""The exact node ↔ instance join through Kubernetes' providerID, against moto's server: a node
whose name is no alias of its instance is joined by its providerID; a node whose providerID names
another instance (or one that is no GPU instance) is never joined by a name instead; nodes with no
AWS providerID fall back to the names; a node list that cannot be read stops the join, and two
nodes naming one instance join neither. Then the whole path: the registry builds the Kubernetes
integration (the fake API server, Node objects with providerIDs) and the cloud under it (moto)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "kubernetes"))
from aws_world import control, launch, provider_id

from gpusteward.domain.errors import SourceError
from gpusteward.integrations.sim import SimClock
from gpusteward.policy.instances import match_nodes

T0 = datetime(2026, 3, 2, tzinfo=UTC)


def ids(mapping: Mapping[str, str]) -> Any:
    return lambda: mapping


def test_a_node_named_after_nothing_on_the_instance_is_joined_by_its_provider_id(aws: str) -> None:
    iid = launch(aws, "g5.xlarge", "worker-7")
    # The node's name is none of the instance's names (tag, DNS, IP, id): no alias can join them.
    assert match_nodes(control(aws, SimClock(T0)).instances(), ["gpu-node-1"]) == {}
    found = control(aws, SimClock(T0), node_ids=ids({"gpu-node-1": provider_id(iid)})).instances()
    assert found["gpu-node-1"].id == iid
    assert found["gpu-node-1"].aliases == ()  # exact: nothing left to match another node
    assert match_nodes(found, ["gpu-node-1", "worker-7"]) == {"gpu-node-1": found["gpu-node-1"]}


def test_a_node_whose_provider_id_names_another_instance_is_not_joined_by_name(aws: str) -> None:
    tagged = launch(aws, "g5.xlarge", "gpu-node-2")  # a reused Name tag: an alias of gpu-node-2
    real = launch(aws, "g5.xlarge", "worker-b")
    by_name = match_nodes(control(aws, SimClock(T0)).instances(), ["gpu-node-2"])
    assert by_name["gpu-node-2"].id == tagged  # what the names alone would do
    found = control(aws, SimClock(T0), node_ids=ids({"gpu-node-2": provider_id(real)})).instances()
    joined = match_nodes(found, ["gpu-node-2"])
    assert joined["gpu-node-2"].id == real
    # The tagged instance lost the claimed name: it goes by its instance id, under no node.
    assert found[tagged].node == tagged
    assert "gpu-node-2" not in found[tagged].aliases


def test_a_node_whose_provider_id_names_no_gpu_instance_is_joined_to_none(aws: str) -> None:
    cpu = launch(aws, "m5.large", "cpu-host")
    launch(aws, "g5.xlarge", "gpu-node-3")
    found = control(aws, SimClock(T0), node_ids=ids({"gpu-node-3": provider_id(cpu)})).instances()
    assert match_nodes(found, ["gpu-node-3"]) == {}


def test_nodes_without_an_aws_provider_id_are_joined_by_name(aws: str) -> None:
    a = launch(aws, "g5.xlarge", "gpu-a")
    b = launch(aws, "g5.xlarge", "gpu-b")
    node_ids = {"gpu-a": "kind://docker/kind/gpu-a", "gpu-b": "aws:///us-east-1a/not-an-instance"}
    found = control(aws, SimClock(T0), node_ids=ids(node_ids)).instances()
    joined = match_nodes(found, ["gpu-a", "gpu-b"])
    assert (joined["gpu-a"].id, joined["gpu-b"].id) == (a, b)


def test_the_node_list_failing_stops_the_join(aws: str) -> None:
    launch(aws, "g5.xlarge", "gpu-a")

    def down() -> Mapping[str, str]:
        raise SourceError("kubernetes node provider IDs: list nodes: HTTP 500: injected")

    with pytest.raises(SourceError, match="provider IDs"):
        control(aws, SimClock(T0), node_ids=down).instances()


def test_two_nodes_naming_one_instance_join_neither(aws: str, caplog: pytest.LogCaptureFixture) -> None:
    iid = launch(aws, "g5.xlarge", "gpu-a")
    node_ids = {"gpu-a": provider_id(iid), "gpu-a-old": provider_id(iid)}
    with caplog.at_level(logging.WARNING):
        found = control(aws, SimClock(T0), node_ids=ids(node_ids)).instances()
    assert match_nodes(found, ["gpu-a", "gpu-a-old"]) == {}
    assert f"instance {iid} is the providerID of nodes ['gpu-a', 'gpu-a-old']" in caplog.text


@pytest.fixture
def kube_api_server() -> Iterator[Any]:
    pytest.importorskip("kubernetes")
    from k8s_fakeapi import FakeApiServer, FakeCluster

    server = FakeApiServer(FakeCluster()).start()
    yield server
    server.stop()


def test_the_registry_joins_kubernetes_nodes_to_their_instances(
    aws: str, kube_api_server: Any, tmp_path: Path
) -> None:
    from k8s_cluster import node

    from gpusteward.runtime.config import load_settings
    from gpusteward.runtime.registry import build_integration

    eks = launch(aws, "g5.xlarge", "eks-worker")  # EKS names the node after its private DNS name
    other = launch(aws, "p4d.24xlarge", "trainer-1")
    kube_api_server.cluster.put("", "nodes", node("trainer-1", provider_id=provider_id(eks)))
    kube_api_server.cluster.put("", "nodes", node("gpu-node-9", provider_id=provider_id(other)))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": kube_api_server.url}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "me"}}],
                "current-context": "fake",
            }
        )
    )
    cfg = tmp_path / "gpusteward.yaml"
    cfg.write_text(
        "source:\n  name: kubernetes\n  kubernetes:\n    config: kubeconfig\n"
        f"    kubeconfig: {kubeconfig}\n"
        f"cloud:\n  provider: aws\n  aws:\n    endpoint_url: {aws}\n    max_attempts: 2\n"
        "  interruption:\n    enabled: false\n"
    )
    integration = build_integration(load_settings(cfg), SimClock(T0))
    try:
        assert integration.instances is not None
        joined = match_nodes(integration.instances.instances(), ["trainer-1", "gpu-node-9"])
        # "trainer-1" is the Name tag of the other instance: the providerID wins over the name.
        assert {n: i.id for n, i in joined.items()} == {"trainer-1": eks, "gpu-node-9": other}
    finally:
        integration.source.close()
