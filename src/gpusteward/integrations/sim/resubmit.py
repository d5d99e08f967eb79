"""Owners who resubmit: a workload gpusteward stopped while it was still useful (the cluster's
ground truth says so) comes back under a new id, same name and owner, ``delay_minutes`` after its
stop, as a queued resubmission that holds no GPU yet. Wraps a source; nothing else changes."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from types import MappingProxyType

from gpusteward.domain.models import Observation, Workload
from gpusteward.integrations.sim.cluster import SimCluster
from gpusteward.integrations.sim.source import SimSource


class ResubmittingSource:
    """Implements ``domain.ports.Source``: the cluster's observation plus the owners' resubmissions."""

    def __init__(self, source: SimSource, cluster: SimCluster, delay_minutes: float = 20.0) -> None:
        self.source = source
        self.cluster = cluster
        self.name = source.name
        self.delay = timedelta(minutes=delay_minutes)
        #: Original workload id → its resubmission.
        self.resubmitted: dict[str, Workload] = {}
        self._seen: dict[str, Workload] = {}

    def observe(self, now: datetime) -> Observation:
        obs = self.source.observe(now)
        for w in obs.workloads:
            self._seen[w.id] = w
        for e in self.cluster.endings():
            first = self._seen.get(e.workload_id)
            wrongly = e.stop_at is not None and e.productive_at_stop
            if (
                wrongly
                and first is not None
                and e.workload_id not in self.resubmitted
                and now >= e.at + self.delay
            ):
                self.resubmitted[e.workload_id] = replace(
                    first,
                    id=f"{first.id}-again",
                    gpu_uuids=(),
                    started_at=e.at + self.delay,
                    ref=MappingProxyType({**first.ref, "sim_id": f"{first.id}-again"}),
                )
        return replace(obs, workloads=obs.workloads + tuple(self.resubmitted.values()))

    def close(self) -> None:
        self.source.close()
