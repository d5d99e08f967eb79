"""The health step of the tick (issue 16): each GPU's state, and the drains of failed GPUs' nodes.

Analyse (every replica): ``observe`` turns the tick's health findings into a state per GPU
(``Health``; worst finding wins; GPUs without any health reading are absent) for the tick
report and the surfaces, and remembers since when each node has had a failed GPU (the drain's
episode). Plan (the leader): ``plan`` asks policy/health.py for one drain per such node that is
not out of scheduling yet. Act: a drain is an L4 decision on the node's synthetic workload,
carried out by the tick's ``ActionRunner`` through ``NodeParkingExecutor`` and the system's
``NodeControl`` (Slurm drain, Kubernetes cordon, the simulator), behind an approval like a park.
A system without a ``NodeControl`` only reports the failure.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np

from gpusteward.analysis.engine import AnalysisResult
from gpusteward.domain.errors import ExecutionError, SourceError
from gpusteward.domain.health import Health
from gpusteward.domain.models import HEALTH_METRICS, Decision, Finding, Gpu, Workload
from gpusteward.domain.nodes import NodeControl
from gpusteward.domain.ports import Clock
from gpusteward.policy.health import failed, failures, gpu_health, plan_drains, repairs
from gpusteward.policy.health_settings import HealthSettings
from gpusteward.runtime.parking_executor import NodeParkingExecutor, node_workload
from gpusteward.store.window import WindowView

if TYPE_CHECKING:
    from gpusteward.domain.integration import Integration
    from gpusteward.runtime.config import Settings

log = logging.getLogger(__name__)


def with_health_data(view: WindowView) -> list[str]:
    """GPUs with any health reading in the window."""
    have = np.zeros(len(view), dtype=np.bool_)
    for m in HEALTH_METRICS:
        if m in view.metrics:
            have |= np.isfinite(view.last(m))
    return [view.uuids[i] for i in np.flatnonzero(have).tolist()]


@dataclass
class HealthStep:
    settings: HealthSettings
    #: The system's node switch; None: failures are reported, never drained.
    control: NodeControl | None = None
    #: GPU uuid → its state at the last tick (what the tick report carries).
    states: Mapping[str, Health] = field(default_factory=dict)
    _failed_since: dict[str, datetime] = field(default_factory=dict)
    _findings: tuple[Finding, ...] = ()
    #: (GPU uuid, holder id or "") → its gpu-failed finding and the holder's incarnation then,
    #: kept while that holder (the same incarnation) holds it, or while a free GPU stays free.
    _latched: dict[tuple[str, str], tuple[Finding, str]] = field(default_factory=dict)
    _gpus: Mapping[str, Gpu] = field(default_factory=dict)

    def executors(self, clock: Clock) -> list[NodeParkingExecutor]:
        return [] if self.control is None else [NodeParkingExecutor(self.control, clock=clock)]

    def observe(
        self,
        now: datetime,
        view: WindowView,
        analysis: AnalysisResult,
        gpus: Mapping[str, Gpu],
        workloads: Mapping[str, Workload],
    ) -> AnalysisResult:
        """This tick's state per GPU, and ``analysis`` with the failures still in force.

        A failed GPU stays failed for as long as the same holder holds it (a free one, while it
        stays free), even once its Xid has left the rule's window: a GPU off the bus does not come
        back by itself, and its holder's idleness stays the fault's. A new holder (the GPU was
        reset and handed out again) ends it; its counters speak for it from then on.
        """
        fresh = failures(analysis.findings)
        if fresh or self._latched:  # most ticks: no failed GPU, nothing to hold (no per-GPU pass)
            analysis = self._latch(now, analysis, fresh, workloads)
        self._findings = analysis.findings
        self._gpus = gpus
        speaking = repairs(self._findings)
        self.states = gpu_health(speaking, with_health_data(view))
        nodes = {gpus[u].node for u in failed(speaking) if u in gpus}
        self._failed_since = {n: self._failed_since.get(n, now) for n in nodes}
        return analysis

    def _latch(
        self, now: datetime, analysis: AnalysisResult, fresh: list[Finding], workloads: Mapping[str, Workload]
    ) -> AnalysisResult:
        """Latch this tick's failures; ``analysis`` with the latched ones that still hold."""
        held = {(u, w.id): w.incarnation for w in workloads.values() for u in w.gpu_uuids}
        for f in fresh:
            for u in f.gpu_uuids:
                key = (u, f.workload_id or "")
                self._latched[key] = (f, held.get(key, ""))
        taken = {u for u, _ in held}
        found = {(u, f.workload_id or "") for f in fresh for u in f.gpu_uuids}
        self._latched = {
            k: (f, inc)
            for k, (f, inc) in self._latched.items()
            if (k[1] == "" and k[0] not in taken) or held.get(k) == inc
        }
        sticky = tuple(replace(f, at=now) for k, (f, _) in sorted(self._latched.items()) if k not in found)
        return replace(analysis, findings=(*analysis.findings, *sticky)) if sticky else analysis

    def plan(self, now: datetime, paused: bool, *, approvals_on: bool) -> list[Decision]:
        """Drains due this tick (none while paused, or without a node control)."""
        if paused or self.control is None or not self._failed_since:
            return []
        try:
            out = self.control.unschedulable()
        except (SourceError, ExecutionError) as e:
            log.warning("no drain planned this tick: cannot read node states: %s", e)
            return []
        since = self._failed_since
        return plan_drains(
            self._findings, self._gpus, since, now, self.settings, out, approvals_on=approvals_on
        )

    def workloads(self, decisions: Iterable[Decision]) -> dict[str, Workload]:
        """The node workloads ``decisions`` name."""
        if self.control is None:
            return {}
        return {
            d.workload_id: node_workload(d.workload_id.removeprefix("node:"), d.gpu_uuids, self.control.name)
            for d in decisions
        }


def build_health(settings: Settings, integration: Integration) -> HealthStep:
    return HealthStep(settings.policy.health, integration.node_control)
