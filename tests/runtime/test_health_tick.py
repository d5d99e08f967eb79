"""GPU health through whole ticks: the default rules, policy, the runner and a node control.

A job sits at 0 % on a GPU that falls off the bus (Xid 79) after 40 min. It is never stopped
as idle, its owner is told once, the tick report carries each GPU's health, and the node's
drain waits for an approval, then runs through the node control; parking never unparks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.health import Health
from gpusteward.domain.models import (
    ApprovalStatus,
    Gpu,
    Level,
    Observation,
    Owner,
    Sample,
    Workload,
    WorkloadKind,
)
from gpusteward.domain.nodes import NodeState
from gpusteward.integrations.sim import SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.policy import PolicySettings
from gpusteward.runtime.build import load_rules
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.health_step import HealthStep
from gpusteward.runtime.loop import Steward
from gpusteward.runtime.parking_executor import DRAIN_REASON, drained_for_health
from gpusteward.runtime.runner import ActionRunner
from gpusteward.store.memory import MemoryStore
from gpusteward.store.window import WindowStore

T0 = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
GPUS = tuple(Gpu(f"GPU-{i}", f"node{i // 2}", i % 2, "H100", 81920.0) for i in range(4))
JOB = Workload("job-1", WorkloadKind.JOB, "train", Owner("alice"), 1, ("GPU-0",), T0 - timedelta(hours=2))
FAILS_AT = timedelta(minutes=40)


@dataclass
class Source:
    """GPU-0 (node0) idle under job-1 and off the bus from FAILS_AT; GPU-1, GPU-2 healthy;
    GPU-3's source cannot read its health."""

    clock: SimClock
    name: str = "fake"

    def observe(self, now: datetime) -> Observation:
        failed = now - T0 >= FAILS_AT
        just = failed and now - T0 < FAILS_AT + timedelta(minutes=5)
        samples = [
            Sample("GPU-0", now, 0.0, 2048.0, 60.0, 40.0, xid_code=79.0 if just else 0.0,
                   xid_fatal=1.0 if just else 0.0, ecc_dbe_count=0.0, throttled=0.0),
            Sample("GPU-1", now, 90.0, 60000.0, 400.0, 60.0, xid_code=0.0, xid_fatal=0.0, throttled=0.0),
            Sample("GPU-2", now, 0.0, 0.0, 60.0, 35.0, xid_code=0.0, xid_fatal=0.0, throttled=0.0),
            Sample("GPU-3", now, 0.0, 0.0, 60.0, 35.0),
        ]  # fmt: skip
        return Observation(now, GPUS, tuple(samples), (JOB,))

    def close(self) -> None:
        pass


@dataclass
class Nodes:
    """A node switch like Slurm's: a parked node keeps its reason."""

    name: str = "fake"
    parked: dict[str, str] = field(default_factory=dict)

    def unschedulable(self) -> Mapping[str, NodeState]:
        return {n: self._state(n) for n in self.parked}

    def _state(self, n: str) -> NodeState:
        reason = self.parked.get(n)
        if reason is None:
            return NodeState(n, False)
        return NodeState(n, True, reason.startswith("gpusteward"), reason)

    def state(self, node: str) -> NodeState | None:
        return self._state(node) if node in {g.node for g in GPUS} else None

    def park(self, node: str, reason: str, at: datetime) -> str:
        self.parked[node] = reason
        return f"drained {node}"

    def unpark(self, node: str) -> str:
        self.parked.pop(node, None)
        return f"resumed {node}"


def test_a_failed_gpu_through_the_ticks() -> None:
    settings = load_settings(None, mode="enforce", tick_seconds=60)
    policy: PolicySettings = settings.policy
    clock = SimClock(T0)
    store = MemoryStore()
    nodes = Nodes()
    health = HealthStep(policy.health, nodes)
    notifier = MemoryNotifier()
    runner = ActionRunner(
        store, health.executors(clock), notifier, clock, dry_run=False, approval=policy.approval
    )
    steward = Steward(
        source=Source(clock),
        store=store,
        window=WindowStore(window_s=4 * 3600, interval_s=60),
        rules=load_rules(settings),
        runner=runner,
        clock=clock,
        policy=policy,
        prices=PriceTable(),
        health=health,
    )
    reports = []
    for _ in range(150):
        reports.append(steward.tick())
        clock.advance(60)
        pending = [a for a in store.approvals(ApprovalStatus.PENDING) if a.workload_id == "node:node0"]
        if pending and clock.now() - T0 >= timedelta(minutes=100):  # an admin approves it late
            store.decide_approval(
                pending[0].id, approve=True, by="ops", at=clock.now(), reason="GPU swap booked"
            )

    before = reports[int(FAILS_AT.total_seconds() // 60) - 1]
    after = reports[60]
    # GPU-3 has no health readings: absent, never "ok".
    assert before.health == {"GPU-0": Health.OK, "GPU-1": Health.OK, "GPU-2": Health.OK}
    assert after.health == {"GPU-0": Health.FAILED, "GPU-1": Health.OK, "GPU-2": Health.OK}

    job = [d for r in reports for d in r.decisions if d.workload_id == JOB.id]
    acted = [d for d in job if d.acts]
    # Idle for 40 min before the failure, so the idle ladder had begun; after it nothing escalates.
    assert all(d.level < Level.GRACEFUL_STOP for d in acted)
    told = [d for d in acted if d.rule == "gpu-failed"]
    assert len(told) == 1
    assert "Xid 79 (GPU has fallen off the bus)" in told[0].reason
    assert {d.hold.value for d in job if d.at > told[0].at} == {"gpu-fault"}

    drains = [d for r in reports for d in r.decisions if d.workload_id == "node:node0"]
    assert drains
    assert drains[0].hold.value == "awaiting-approval"
    assert nodes.parked == {"node0": DRAIN_REASON}  # once approved, through the node control
    assert drained_for_health(nodes._state("node0"))
    drained_at = min(
        a.decision.at for r in reports for a in r.actions if a.decision.workload_id == "node:node0"
    )
    assert drained_at - T0 >= timedelta(minutes=100)


def test_parking_never_unparks_a_node_drained_for_a_failed_gpu() -> None:
    from gpusteward.runtime.parking_step import ParkingStep

    settings = load_settings(None, mode="enforce", tick_seconds=60)
    nodes = Nodes(parked={"node0": DRAIN_REASON, "node1": "gpusteward: idle, low-load window"})
    step = ParkingStep(settings.parking, nodes)
    view = WindowStore(window_s=3600, interval_s=60).view(T0)
    got = {
        n.name: (n.parked, n.foreign)
        for n in step.nodes(T0, view, {g.uuid: g for g in GPUS}, {}, nodes.unschedulable())
    }
    # Drained for health: someone else's to put back (an admin, after the repair); parked: ours.
    assert got == {"node0": (False, True), "node1": (True, False)}
