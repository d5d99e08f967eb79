"""The instance step of the tick (L4): the cloud instances behind idle GPU nodes, stopped.

Analyse (every replica, so a new leader takes over warm): ``observe`` tracks since when every
GPU of each node has been free and idle with fresh data (in memory: after a restart a node waits
``idle_minutes`` again), reads the instances behind the nodes (``InstanceControl.instances``: a
few API calls) and joins them to the nodes by name; the nodes' GPUs are priced at their
instance's price from then on, so waste and the savings of a stop are counted at what the cloud
charges. When the instances cannot be read, nothing is planned this tick: no stop from stale data.
Plan (the leader): the pure planner (policy/instances.py). Act: the stops are decisions on the
instances' workloads (``node/<instance-id>``), carried out by the tick's one ``ActionRunner``
through ``InstanceExecutor``; a stop waits for an approval like any L4 step (policy/approval.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from gpusteward.domain.cloud import Instance, InstanceControl, instance_workload_id
from gpusteward.domain.errors import ConfigError, ExecutionError, SourceError
from gpusteward.domain.models import Gpu, Workload
from gpusteward.domain.ports import Clock
from gpusteward.policy.instance_settings import InstanceSettings
from gpusteward.policy.instances import InstanceInput, InstancePlan, match_nodes, plan_instances
from gpusteward.policy.parking import NodeView
from gpusteward.runtime.instance_executor import InstanceExecutor, instance_workload
from gpusteward.runtime.node_idle import nodes_now
from gpusteward.store.window import WindowView

if TYPE_CHECKING:
    from gpusteward.domain.integration import Integration
    from gpusteward.runtime.config import Settings

log = logging.getLogger(__name__)


@dataclass
class InstanceStep:
    settings: InstanceSettings
    control: InstanceControl
    stale_after_s: float = 180.0
    _free_since: dict[str, datetime] = field(default_factory=dict)
    #: This tick's nodes; None when the instances could not be read (nothing is planned then).
    _nodes: list[NodeView] | None = None
    #: This tick's instances by the cluster's node name.
    _instances: dict[str, Instance] = field(default_factory=dict)
    last: InstancePlan | None = None

    def executors(self, clock: Clock) -> list[InstanceExecutor]:
        return [InstanceExecutor(self.control, clock, wait_s=self.settings.stop_wait_seconds)]

    def observe(
        self, now: datetime, view: WindowView, gpus: dict[str, Gpu], workloads: Mapping[str, Workload]
    ) -> None:
        """Track the nodes' idle time, read their instances, price their GPUs. Changes nothing
        outside (``gpus`` is the tick's own table of GPUs)."""
        nodes = self.nodes(now, view, gpus, workloads)
        try:
            found = self.control.instances()
        except (SourceError, ExecutionError) as e:
            log.warning("instance stops skipped this tick: cannot read the instances: %s", e)
            self._nodes, self._instances = None, {}
            return
        self._nodes = nodes
        self._instances = match_nodes(found, [n.name for n in nodes])
        for node in nodes:
            inst = self._instances.get(node.name)
            if inst is None or inst.price_per_hour <= 0 or inst.gpus <= 0:
                continue
            each = inst.price_per_hour / inst.gpus
            for uuid in node.gpu_uuids:
                g = gpus.get(uuid)
                if g is not None and g.price_per_hour != each:
                    gpus[uuid] = replace(g, price_per_hour=each)

    def plan(self, now: datetime, paused: bool) -> InstancePlan | None:
        """This tick's stops (None when the instances could not be read)."""
        if self._nodes is None:
            return None
        self.last = plan_instances(InstanceInput(now, self._nodes, self._instances, paused), self.settings)
        for note in self.last.notes:
            log.debug("node %s, instance %s: %s", note.node, note.instance_id, note.why)
        return self.last

    def workloads(self) -> dict[str, Workload]:
        """The workloads the stops name: each joined instance, with its node's GPUs."""
        by_node = {n.name: n for n in self._nodes or ()}
        return {
            instance_workload_id(inst.id): instance_workload(inst, by_node[name].gpu_uuids, self.control.name)
            for name, inst in self._instances.items()
            if name in by_node
        }

    def nodes(
        self, now: datetime, view: WindowView, gpus: Mapping[str, Gpu], workloads: Mapping[str, Workload]
    ) -> list[NodeView]:
        """Every node with GPUs now, and since when all of them have been free and idle."""
        now_nodes = nodes_now(
            view, gpus, workloads, stale_after_s=self.stale_after_s, idle_util_pct=self.settings.idle_util_pct
        )
        out = []
        for node in now_nodes:
            name = node.name
            if node.idle:
                self._free_since.setdefault(name, now)
            else:
                self._free_since.pop(name, None)
            out.append(
                NodeView(
                    name=name,
                    pool=node.gpus[0].pool,
                    gpu_uuids=tuple(g.uuid for g in node.gpus),
                    held=node.held,
                    free_since=self._free_since.get(name),
                )
            )
        for gone in set(self._free_since) - {
            n.name for n in now_nodes
        }:  # a stopped node starts over when back
            del self._free_since[gone]
        return out


def build_instance_step(settings: Settings, integration: Integration) -> InstanceStep | None:
    """The instance step when ``cloud.instances.enabled``."""
    cfg = settings.cloud.instances
    if not cfg.enabled:
        return None
    if integration.instances is None:
        raise ConfigError(
            "cloud.instances.enabled: no cloud instances to stop; set cloud.provider: aws "
            f"(source {integration.name!r} brings none of its own)"
        )
    return InstanceStep(cfg, integration.instances, stale_after_s=settings.analysis.stale_after_seconds)
