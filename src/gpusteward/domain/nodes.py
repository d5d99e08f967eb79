"""Nodes as L4 parking sees them: the port to a system's node scheduling switch, and what it reports.

Parking takes a node out of scheduling (Kubernetes cordon, Slurm drain) without stopping what
runs on it. Every implementation marks the nodes it parks (an annotation, a reason starting
with ``gpusteward``) so that unparking only ever touches nodes gpusteward parked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

#: Prefix of the reason gpusteward writes on a node it parks (Slurm reason, Kubernetes annotation).
PARK_REASON_PREFIX = "gpusteward"
#: Kubernetes annotations written on a cordoned node: when, and why (the undo needs only these).
PARKED_AT_KEY = "gpusteward.io/parked-at"
PARKED_REASON_KEY = "gpusteward.io/parked-reason"


def node_workload_id(node: str) -> str:
    return f"node:{node}"


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node's scheduling state: out of scheduling (``parked``) by gpusteward (``ours``) or not."""

    name: str
    parked: bool
    ours: bool = False
    reason: str = ""
    parked_at: datetime | None = None


@runtime_checkable
class NodeControl(Protocol):
    """A system's node scheduling switch. Methods raise ``SourceError`` when the system cannot be
    reached; ``ExecutionError`` when it refused."""

    name: str

    def unschedulable(self) -> Mapping[str, NodeState]:
        """Every node out of scheduling now (cordoned, drained, draining), by name."""
        ...

    def state(self, node: str) -> NodeState | None:
        """The node's state now; None when there is no such node."""
        ...

    def park(self, node: str, reason: str, at: datetime) -> str:
        """Take ``node`` out of scheduling with gpusteward's mark; returns what was done."""
        ...

    def unpark(self, node: str) -> str:
        """Put a node gpusteward parked back into scheduling; returns what was done."""
        ...
