"""Each node's ``spec.providerID`` through the integration's ``node_ids``, against the fake API
server: read from the Node objects (nodes without one left out), from the node list parking just
read when it is fresh, and a list that fails raised as a ``SourceError`` (no join from a guess)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from k8s_cluster import NODE_1, NODE_2, node
from test_cli_restore import config_for

from gpusteward.domain.errors import SourceError
from gpusteward.integrations.kubernetes.kubeapi import KubeApi
from gpusteward.integrations.kubernetes.node_control import PROVIDER_IDS_REUSE_S, KubernetesNodeControl

EKS_ID_1 = "aws:///us-east-1a/i-0a1b2c3d4e5f60718"
EKS_ID_2 = "aws:///us-east-1b/i-0f9e8d7c6b5a40392"


class Monotonic:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def node_lists(cluster: Any) -> int:
    return sum(1 for c in cluster.calls if c.resource == "nodes" and c.verb == "list")


def test_the_integration_gives_each_nodes_provider_id(tmp_path: Path, server: Any, cluster: Any) -> None:
    from gpusteward.integrations.sim import SimClock
    from gpusteward.runtime.config import load_settings
    from gpusteward.runtime.registry import build_integration

    cluster.put("", "nodes", node(NODE_1, provider_id=EKS_ID_1))  # NODE_2 keeps none (kind, bare metal)
    settings = load_settings(config_for(tmp_path, server.url))
    integration = build_integration(settings, SimClock(datetime.now(UTC)))
    try:
        assert integration.node_ids is not None
        assert dict(integration.node_ids()) == {NODE_1: EKS_ID_1}
        # Read through the integration's one API client (the same calls RBAC grants: list nodes).
        assert integration.node_control is not None
        assert integration.node_control.api is integration.source.api  # type: ignore[attr-defined]
    finally:
        integration.source.close()


def test_the_node_list_parking_read_is_reused_while_fresh(api_client: Any, cluster: Any) -> None:
    cluster.put("", "nodes", node(NODE_1, provider_id=EKS_ID_1))
    clock = Monotonic()
    control = KubernetesNodeControl(KubeApi(api_client, timeout_s=5), monotonic=clock)
    assert control.unschedulable() == {}
    assert node_lists(cluster) == 1
    assert control.provider_ids() == {NODE_1: EKS_ID_1}
    assert node_lists(cluster) == 1  # the list parking just made
    cluster.put("", "nodes", node(NODE_2, provider_id=EKS_ID_2))
    clock.now += PROVIDER_IDS_REUSE_S + 1
    assert control.provider_ids() == {NODE_1: EKS_ID_1, NODE_2: EKS_ID_2}
    assert node_lists(cluster) == 2


def test_a_node_list_that_fails_is_a_source_error(api_client: Any, cluster: Any) -> None:
    control = KubernetesNodeControl(KubeApi(api_client, timeout_s=5), monotonic=Monotonic())
    cluster.fail("GET", r"/api/v1/nodes$", 500, times=1)
    with pytest.raises(SourceError, match="list nodes: HTTP 500"):
        control.provider_ids()
    assert control.provider_ids() == {}  # the scenario's nodes carry no providerID


def test_the_api_server_down_is_a_source_error(server: Any) -> None:
    from conftest import client_for

    client = client_for(server.url)
    server.stop()
    try:
        control = KubernetesNodeControl(KubeApi(client, timeout_s=2), monotonic=Monotonic())
        with pytest.raises(SourceError, match="list nodes"):
            control.provider_ids()
    finally:
        client.close()
