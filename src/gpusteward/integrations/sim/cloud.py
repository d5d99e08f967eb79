"""Cloud instances under the simulated cluster's nodes: ``InstanceControl`` (L4 stop and start)
over ``SimCluster``, and the source that leaves a node's GPUs out while its instance is away.

Every node runs on one instance of ``instance_type``; a seeded share of them are spot and reserved,
the rest on-demand, each priced per hour from the cost table at its rate. A stopped instance's node
is down: nothing is placed on it and its GPUs leave the observation (so the loop never counts them
idle or wasting); the instance-hours it stays stopped are counted as saved. The spot interruptions
are ``spot.py``'s; they share this record of instances.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np

from gpusteward.domain.cloud import Instance, Lifecycle
from gpusteward.domain.errors import ExecutionError
from gpusteward.domain.models import Observation
from gpusteward.integrations.sim.cluster import SimCluster
from gpusteward.integrations.sim.source import SimSource

RUNNING, STOPPED, TERMINATED = "running", "stopped", "terminated"


@dataclass(frozen=True, slots=True)
class CloudPlan:
    """How the nodes' instances are drawn and priced (``SimSourceSettings`` gives the values)."""

    instance_type: str = "p4d.24xlarge"
    spot_share: float = 0.25
    reserved_share: float = 0.25
    #: Price of one GPU-hour at each rate (the cost table's ``price(model, rate)``).
    gpu_hour_prices: Mapping[Lifecycle, float] | None = None


@dataclass(frozen=True, slots=True)
class StopRecord:
    """One stop of an instance by ``stop``, and its ``start`` (None: still stopped)."""

    instance_id: str
    node: str
    lifecycle: Lifecycle
    price_per_hour: float
    stopped_s: float
    started_s: float | None = None

    def hours(self, until_s: float) -> float:
        end = until_s if self.started_s is None else min(self.started_s, until_s)
        return max(0.0, end - self.stopped_s) / 3600.0


def lifecycles(nodes: int, plan: CloudPlan, seed: int) -> list[Lifecycle]:
    """Each node's lifecycle, by node index: seeded, so the same seed gives the same fleet."""
    spot = round(nodes * plan.spot_share)
    reserved = min(nodes - spot, round(nodes * plan.reserved_share))
    kinds = [Lifecycle.SPOT] * spot + [Lifecycle.RESERVED] * reserved
    kinds += [Lifecycle.ON_DEMAND] * (nodes - len(kinds))
    order = np.random.default_rng([seed, 18]).permutation(nodes)
    return [kinds[int(i)] for i in order]


class SimCloud:
    """The instances behind a ``SimCluster``'s nodes, one per node, and what was done to them."""

    def __init__(self, cluster: SimCluster, plan: CloudPlan = CloudPlan()) -> None:
        self.cluster = cluster
        self.plan = plan
        gpn = cluster.gpus_per_node
        self.nodes = [cluster.gpus[n * gpn].node for n in range(cluster.nodes)]
        prices = plan.gpu_hour_prices or {}
        self._instances: dict[str, Instance] = {}
        for node, life in zip(self.nodes, lifecycles(cluster.nodes, plan, cluster.seed), strict=True):
            self._instances[node] = Instance(
                id=self.instance_id(node, 0),
                node=node,
                instance_type=plan.instance_type,
                lifecycle=life,
                state=RUNNING,
                launched_at=cluster.start,
                gpus=gpn,
                price_per_hour=gpn * prices.get(life, 0.0),
                zone="sim-1a",
            )
        #: Every stop through ``stop``, in order.
        self.stops: list[StopRecord] = []

    @staticmethod
    def instance_id(node: str, generation: int) -> str:
        """A node's instance id; a taken spot instance's replacement is the next generation."""
        return f"i-{node}-{generation}"

    def like(self, cluster: SimCluster) -> SimCloud:
        """The same fleet over another cluster of the same size and seed (a counterfactual)."""
        return SimCloud(cluster, self.plan)

    def now_s(self) -> float:
        return self.cluster.offset_of(self.cluster.now)

    def instances(self) -> dict[str, Instance]:
        return dict(self._instances)

    def by_id(self, instance_id: str) -> Instance | None:
        return next((i for i in self._instances.values() if i.id == instance_id), None)

    def set_state(self, node: str, state: str, recorded: Mapping[str, str] | None = None) -> Instance:
        """``recorded``: what a stop leaves on the instance for its undo (``{}`` clears it)."""
        old = self._instances[node]
        keep = old.recorded if recorded is None else dict(recorded)
        got = self._instances[node] = replace(old, state=state, recorded=keep)
        return got

    def replace_instance(self, node: str, generation: int, at: datetime) -> Instance:
        """A new instance for ``node`` (a taken spot instance's replacement), running."""
        old = self._instances[node]
        new = replace(old, id=self.instance_id(node, generation), state=RUNNING, launched_at=at, recorded={})
        self._instances[node] = new
        return new

    def figures(self, until: datetime) -> dict[str, float | int]:
        """Stops, instance-hours saved while stopped, and their price (a reserved instance's
        hours are paid for anyway: they save no money)."""
        u = self.cluster.offset_of(until)
        hours = [(s, s.hours(u)) for s in self.stops if s.stopped_s <= u]
        money = sum(h * s.price_per_hour for s, h in hours if s.lifecycle is not Lifecycle.RESERVED)
        return {
            "instances_stopped": len(hours),
            "instance_hours_saved": round(sum(h for _, h in hours), 2),
            "instance_cost_saved": round(money, 2),
        }


class SimInstanceControl:
    """Implements ``gpusteward.domain.cloud.InstanceControl`` over a ``SimCloud``. A stop refuses
    a node that still runs a workload (a real cloud would kill it; the loop's pre-flight should
    never ask)."""

    def __init__(self, cloud: SimCloud) -> None:
        self.cloud = cloud
        self.name = cloud.cluster.source_name

    def instances(self) -> Mapping[str, Instance]:
        return self.cloud.instances()

    def instance(self, instance_id: str) -> Instance | None:
        return self.cloud.by_id(instance_id)

    def stop(self, instance: Instance, reason: str) -> str:
        now = self.cloud.by_id(instance.id)
        if now is None:
            raise ExecutionError(f"sim: instance {instance.id} no longer exists; nothing done")
        if now.state == STOPPED:
            return f"{now.id} ({now.node}) already stopped"
        if now.state != RUNNING:
            raise ExecutionError(f"sim: instance {now.id} is {now.state}; nothing done")
        busy = self.cloud.cluster.runs_on(now.node)
        if busy:
            raise ExecutionError(f"sim: {now.node} still runs {len(busy)} workloads; nothing done")
        at = self.cloud.now_s()
        record = {"action": "stop", "reason": reason[:200], "at_s": f"{at:.0f}"}
        self.cloud.set_state(now.node, STOPPED, record)
        self.cloud.cluster.node_down(now.node)
        self.cloud.stops.append(StopRecord(now.id, now.node, now.lifecycle, now.price_per_hour, at))
        return f"stopped {now.id} ({now.node}): {reason}"

    def start(self, instance_id: str, record: Mapping[str, str]) -> str:
        now = self.cloud.by_id(instance_id)
        if now is None:
            raise ExecutionError(f"sim: instance {instance_id} no longer exists; nothing done")
        if now.state == RUNNING:
            return f"{instance_id} ({now.node}) already running"
        if now.state != STOPPED:
            raise ExecutionError(f"sim: instance {instance_id} is {now.state}; nothing done")
        self.cloud.set_state(now.node, RUNNING, {})
        self.cloud.cluster.node_up(now.node)
        at = self.cloud.now_s()
        for k, s in enumerate(self.cloud.stops):
            if s.instance_id == instance_id and s.started_s is None:
                self.cloud.stops[k] = replace(s, started_s=at)
        return f"started {instance_id} ({now.node})"


class CloudSource:
    """Implements ``domain.ports.Source``: the cluster's observation without the GPUs of nodes
    whose instance is away (stopped, or taken and not yet replaced)."""

    def __init__(self, source: SimSource) -> None:
        self.source = source
        self.cluster = source.cluster
        self.name = source.name

    def observe(self, now: datetime) -> Observation:
        obs = self.source.observe(now)
        down = self.cluster.down_nodes
        if not down:
            return obs
        gone = {g.uuid for g in obs.gpus if g.node in down}
        return replace(
            obs,
            gpus=tuple(g for g in obs.gpus if g.uuid not in gone),
            samples=tuple(s for s in obs.samples if s.gpu_uuid not in gone),
        )

    def close(self) -> None:
        self.source.close()
