"""The L4 plans of a tick as decisions: node parks and unparks, node drains for failed GPUs,
idle nodes' instance stops, pool scales; and the synthetic workloads they name, remembered like
workloads so that approvals, `explain` and the web name them (an approval is only taken for a
workload seen lately).
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from gpusteward.domain.models import Decision, Level, Workload
from gpusteward.domain.store_ports import TickStore
from gpusteward.policy.settings import ApprovalSettings
from gpusteward.runtime.health_step import HealthStep
from gpusteward.runtime.instance_step import InstanceStep
from gpusteward.runtime.parking_step import ParkingStep
from gpusteward.runtime.tide_step import TideStep


class L4Steps(Protocol):
    """The tick's L4 steps (the ``Steward``'s), each None when off."""

    @property
    def parking(self) -> ParkingStep | None: ...

    @property
    def tide(self) -> TideStep | None: ...

    @property
    def health(self) -> HealthStep | None: ...

    @property
    def instances(self) -> InstanceStep | None: ...


def infra_plans(
    store: TickStore, now: datetime, paused: bool, steps: L4Steps, approval: ApprovalSettings
) -> tuple[list[Decision], dict[str, Workload]]:
    """The L4 decisions of this tick and the workloads they name."""
    parking, tide, health, instances = steps.parking, steps.tide, steps.health, steps.instances
    decisions: list[Decision] = []
    targets: dict[str, Workload] = {}
    if parking is not None:
        plan = parking.plan(now, paused)
        if plan is not None:
            nodes = parking.workloads()
            decisions += [*plan.parks, *plan.unparks]
            store.remember_workloads([nodes[w] for w in parking.named(plan)], now)
            targets.update(nodes)
    if health is not None:
        drains = health.plan(now, paused, approvals_on=approval.needs_approval(Level.INFRA))
        nodes = health.workloads(drains)
        store.remember_workloads(list(nodes.values()), now)
        decisions += drains
        targets.update(nodes)
    if instances is not None:  # idle nodes' cloud instances stopped (after parking: a parked node is free)
        stops = instances.plan(now, paused)
        if stops is not None:
            machines = instances.workloads()
            store.remember_workloads([machines[d.workload_id] for d in stops.stops], now)
            decisions += stops.stops
            targets.update(machines)
    if tide is not None:
        scales = tide.decisions(now, paused)
        pools = tide.workloads()
        store.remember_workloads([pools[d.workload_id] for d in scales if d.workload_id in pools], now)
        decisions += scales
        targets.update(pools)
    return decisions, targets
