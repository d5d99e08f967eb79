"""``NodeControl`` over the simulated cluster: parking takes a node out of its scheduler."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from gpusteward.domain.nodes import PARK_REASON_PREFIX, NodeState
from gpusteward.integrations.sim.cluster import SimCluster


class SimNodeControl:
    """Implements ``gpusteward.domain.nodes.NodeControl`` for a ``SimCluster``."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.name = cluster.source_name
        self._nodes = {g.node for g in cluster.gpus}

    def _of(self, node: str) -> NodeState:
        got = self.cluster.parked_nodes.get(node)
        if got is None:
            return NodeState(node, parked=False)
        reason, since = got
        return NodeState(node, True, reason.startswith(PARK_REASON_PREFIX), reason, since)

    def unschedulable(self) -> Mapping[str, NodeState]:
        return {n: self._of(n) for n in self.cluster.parked_nodes}

    def state(self, node: str) -> NodeState | None:
        return self._of(node) if node in self._nodes else None

    def park(self, node: str, reason: str, at: datetime) -> str:
        self.cluster.park_node(node, reason, at)
        return f"parked {node}: no new job is placed on it"

    def unpark(self, node: str) -> str:
        self.cluster.unpark_node(node)
        return f"unparked {node}: it takes jobs again"
