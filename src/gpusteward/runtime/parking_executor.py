"""L4 parking as an ``Executor``: park-node / unpark-node on a node workload, through a ``NodeControl``.

A node is a synthetic workload (``Workload(id="node:<name>", kind=NODE)``, see ``node_workload``),
so parking goes through the ``ActionRunner`` like every other step: planned, idempotent, dry-run
aware, gated by approvals, audited. The system-specific part is the ``NodeControl`` (Kubernetes
cordon, Slurm drain, the simulator), injected, so this module calls no outside system itself.

Safety: a park never marks a node that someone else already took out of scheduling (that would
make it ours to unpark later); an unpark never touches a node without gpusteward's mark.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from gpusteward.domain.errors import ExecutionError, PreflightFailed, SourceError
from gpusteward.domain.models import Decision, Level, Outcome, Owner, Workload, WorkloadKind, utc
from gpusteward.domain.nodes import PARK_REASON_PREFIX, NodeControl, NodeState, node_workload_id
from gpusteward.domain.ports import Clock, SystemClock

PARK_STEP = "park-node"
UNPARK_STEP = "unpark-node"
#: A failed GPU's node out of scheduling (policy/health.py); parking never unparks it.
DRAIN_STEP = "drain-node"
#: What is written on the node (Slurm keeps reasons short; the full reason is in the audit).
PARK_REASON = f"{PARK_REASON_PREFIX}: idle, low-load window"
DRAIN_REASON = f"{PARK_REASON_PREFIX}: GPU failed"


def drained_for_health(state: NodeState) -> bool:
    """Out of scheduling because of a failed GPU: an admin puts it back after the repair."""
    return state.parked and state.reason.startswith(DRAIN_REASON)


#: Who node notices go to: there is no owner of a node but the admins.
ADMINS = Owner(user="admins", team="")
#: Node workloads have no incarnation of their own: a fixed start keeps pre-flight's check simple.
_EPOCH = utc(0)


def node_workload(node: str, gpu_uuids: Sequence[str], source: str) -> Workload:
    return Workload(
        id=node_workload_id(node),
        kind=WorkloadKind.NODE,
        name=node,
        owner=ADMINS,
        gpus_requested=len(gpu_uuids),
        gpu_uuids=tuple(gpu_uuids),
        started_at=_EPOCH,
        source=source,
        ref=MappingProxyType({"node": node}),
    )


class NodeParkingExecutor:
    """Implements ``Executor`` for node workloads of ``control.name`` at L4."""

    def __init__(self, control: NodeControl, *, clock: Clock | None = None) -> None:
        self.control = control
        self.name = control.name
        self.clock = clock or SystemClock()

    def supports(self, workload: Workload, level: Level) -> bool:
        # A node workload that names its cloud instance is the instance executor's (stop / start).
        return (
            level is Level.INFRA
            and workload.kind is WorkloadKind.NODE
            and workload.source == self.name
            and "instance_id" not in workload.ref
        )

    def _state(self, node: str) -> NodeState | None:
        try:
            return self.control.state(node)
        except SourceError as e:
            raise ExecutionError(f"cannot read node {node} now, nothing done: {e}") from e

    def current(self, workload: Workload) -> Workload | None:
        return workload if self._state(workload.name) is not None else None

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        node = workload.name
        state = self._state(node)
        if state is None:
            raise PreflightFailed(f"node {node} is gone")
        try:
            if decision.step == PARK_STEP:
                if state.parked and state.ours:
                    return Outcome(True, f"node {node} already parked by gpusteward", verified=True)
                if state.parked:
                    raise PreflightFailed(
                        f"node {node} is already out of scheduling, not by gpusteward "
                        f"({state.reason or 'no reason'}): left alone"
                    )
                done = self.control.park(node, PARK_REASON, self.clock.now())
            elif decision.step == DRAIN_STEP:
                if state.parked:  # by us or by someone else: out of scheduling is what is wanted
                    return Outcome(True, f"node {node} already out of scheduling", verified=True)
                done = self.control.park(node, DRAIN_REASON, self.clock.now())
            elif decision.step == UNPARK_STEP:
                if not state.parked:
                    return Outcome(True, f"node {node} already schedulable", verified=True)
                if not state.ours:
                    raise PreflightFailed(
                        f"node {node} was taken out of scheduling by someone else since "
                        f"({state.reason or 'no reason'}): left alone"
                    )
                done = self.control.unpark(node)
            else:
                raise ExecutionError(f"{decision.step} is not something the node executor does")
        except SourceError as e:
            raise ExecutionError(f"{decision.step} {node}: {e}") from e
        return Outcome(True, done, verified=self.verify(decision, workload))

    def verify(self, decision: Decision, workload: Workload) -> bool:
        state = self._state(workload.name)
        if state is None:
            return False
        if decision.step == PARK_STEP:
            return state.parked and state.ours
        if decision.step == DRAIN_STEP:
            return state.parked
        return not state.parked
