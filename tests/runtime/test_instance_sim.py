"""Instance stops through the tick on the simulator's cloud nodes (``source.sim.cloud_nodes``):
the same step and executor as on AWS, through the simulator's ``InstanceControl``. The stops go
to the instance executor, not to the simulator's node executor (both claim the system's nodes)."""

from __future__ import annotations

from gpusteward.domain.models import ActionStatus, ApprovalStatus
from gpusteward.integrations.sim import DEFAULT_START, SimClock
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings
from gpusteward.store.memory import MemoryStore


def test_idle_sim_nodes_instances_are_stopped_once_approved() -> None:
    settings = load_settings(
        None,
        mode="enforce",
        tick_seconds=60,
        source={"name": "sim", "sim": {"scenario": "small", "history_hours": 0, "cloud_nodes": True}},
        cloud={"instances": {"enabled": True, "idle_minutes": 30, "reserve_nodes": 0, "max_per_tick": 3}},
    )
    clock, store = SimClock(DEFAULT_START), MemoryStore()
    steward, integration = build_steward(settings, clock=clock, store=store, backfill=False)
    assert integration.instances is not None
    for _ in range(60):
        steward.tick()
        clock.advance(60)
        for a in store.approvals(ApprovalStatus.PENDING):
            if a.workload_id.startswith("node/"):
                store.decide_approval(a.id, approve=True, by="ops", at=clock.now(), reason="night")
    acts = [a for a in store.actions(limit=1000) if a.workload_id.startswith("node/")]
    assert acts
    assert {(a.step, a.status) for a in acts} == {("stop-instance", ActionStatus.SUCCEEDED)}
    for a in acts:
        inst = integration.instances.instance(a.workload_id.removeprefix("node/"))
        assert inst is not None
        assert inst.state == "stopped"
