"""``NodeControl`` for Kubernetes: cordon / uncordon a Node, marked with gpusteward's annotations.

Park is one JSON merge patch that sets ``spec.unschedulable`` and writes
``gpusteward.io/parked-at`` and ``gpusteward.io/parked-reason`` in the same write (so there is
never a node cordoned by us without its mark); unpark clears all three in one write, only on a
node that carries the mark. Both carry the resourceVersion just read: a 409 Conflict re-reads
the node and tries again (bounded). Nothing is evicted: running pods go on, new ones go elsewhere.

The same node list gives each node's ``spec.providerID`` (``aws:///<zone>/<instance-id>``), the
exact join of a node to the cloud instance behind it (``Integration.node_ids``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from gpusteward.domain.errors import ExecutionError, PreflightFailed, SourceError
from gpusteward.domain.nodes import PARKED_AT_KEY, PARKED_REASON_KEY, NodeState
from gpusteward.integrations.kubernetes.control import ApiReply, annotations_of, metadata, rfc3339


class NodeApi(Protocol):
    """What parking needs of the API; ``sensing.kubernetes.api.KubeApi`` implements it."""

    def get_node(self, name: str) -> ApiReply: ...

    def list_nodes(self) -> ApiReply: ...

    def patch_node(self, name: str, body: Mapping[str, Any]) -> ApiReply: ...


def node_state(obj: Mapping[str, Any]) -> NodeState:
    name = str(metadata(obj).get("name") or "")
    spec = obj.get("spec")
    parked = bool(spec.get("unschedulable")) if isinstance(spec, Mapping) else False
    notes = annotations_of(obj)
    ours = PARKED_AT_KEY in notes
    at = None
    if ours:
        try:
            at = datetime.fromisoformat(notes[PARKED_AT_KEY].replace("Z", "+00:00"))
        except ValueError:
            at = None
    return NodeState(name, parked, ours and parked, notes.get(PARKED_REASON_KEY, ""), at)


def provider_id(obj: Mapping[str, Any]) -> str:
    """The node's ``spec.providerID`` ("" when the cloud controller set none: kind, bare metal)."""
    spec = obj.get("spec")
    return str(spec.get("providerID") or "") if isinstance(spec, Mapping) else ""


#: A node list read this recently is reused for the provider IDs (parking reads one each tick,
#: just before the instance step asks), so the join costs no second list.
PROVIDER_IDS_REUSE_S = 5.0


class KubernetesNodeControl:
    """Implements ``gpusteward.domain.nodes.NodeControl`` (named like the source: ``kubernetes``)."""

    def __init__(
        self,
        api: NodeApi,
        *,
        name: str = "kubernetes",
        conflict_retries: int = 3,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.name = name
        self.conflict_retries = conflict_retries
        self.monotonic = monotonic
        #: (read at, provider ID by node name) of the last node list.
        self._provider_ids: tuple[float, dict[str, str]] | None = None

    def _nodes(self) -> list[Mapping[str, Any]]:
        got = self.api.list_nodes()
        if not got.ok:
            raise ExecutionError(f"list nodes: HTTP {got.status}: {got.message}")
        items = [n for n in got.body.get("items") or [] if isinstance(n, Mapping)]
        ids = {str(metadata(n).get("name") or ""): provider_id(n) for n in items}
        self._provider_ids = (self.monotonic(), {k: v for k, v in ids.items() if k and v})
        return items

    def unschedulable(self) -> Mapping[str, NodeState]:
        states = (node_state(n) for n in self._nodes())
        return {s.name: s for s in states if s.parked}

    def provider_ids(self) -> Mapping[str, str]:
        """Each node's providerID by node name (nodes without one left out), from a node list at
        most ``PROVIDER_IDS_REUSE_S`` old. ``SourceError`` when the nodes cannot be listed: an
        instance is then joined to no node rather than by a name alone."""
        last = self._provider_ids
        if last is not None and self.monotonic() - last[0] <= PROVIDER_IDS_REUSE_S:
            return dict(last[1])
        try:
            self._nodes()
        except ExecutionError as e:
            raise SourceError(f"kubernetes node provider IDs: {e}") from e
        assert self._provider_ids is not None
        return dict(self._provider_ids[1])

    def _read(self, node: str) -> dict[str, Any] | None:
        got = self.api.get_node(node)
        if got.status == 404:
            return None
        if not got.ok:
            raise ExecutionError(f"read node {node}: HTTP {got.status}: {got.message}")
        return got.body

    def state(self, node: str) -> NodeState | None:
        obj = self._read(node)
        return None if obj is None else node_state(obj)

    def _patch(self, node: str, patch: Mapping[str, Any], done: str, *, park: bool) -> str:
        for _ in range(self.conflict_retries + 1):
            obj = self._read(node)
            if obj is None:
                raise ExecutionError(f"node {node} not found")
            # Checked again on every read: a 409 means someone else wrote the node meanwhile.
            st = node_state(obj)
            if park and st.parked and not st.ours:
                raise PreflightFailed(f"node {node} was cordoned by someone else: left alone")
            if not park and not st.ours:
                return f"node {node} no longer carries gpusteward's mark: left alone"
            rv = metadata(obj).get("resourceVersion")
            meta = dict(patch.get("metadata") or {})
            body = {**patch, "metadata": {**meta, "resourceVersion": rv}}
            put = self.api.patch_node(node, body)
            if put.status == 409:
                continue  # the node changed since it was read (kubelet status, labels): read again
            if not put.ok:
                raise ExecutionError(f"patch node {node}: HTTP {put.status}: {put.message}")
            return done
        raise ExecutionError(f"patch node {node}: still 409 Conflict after {self.conflict_retries} retries")

    def park(self, node: str, reason: str, at: datetime) -> str:
        patch = {
            "metadata": {"annotations": {PARKED_AT_KEY: rfc3339(at), PARKED_REASON_KEY: reason}},
            "spec": {"unschedulable": True},
        }
        return self._patch(
            node, patch, f"cordoned node {node} (spec.unschedulable, {PARKED_AT_KEY})", park=True
        )

    def unpark(self, node: str) -> str:
        patch = {
            "metadata": {"annotations": {PARKED_AT_KEY: None, PARKED_REASON_KEY: None}},
            "spec": {"unschedulable": None},
        }
        return self._patch(node, patch, f"uncordoned node {node}", park=False)
