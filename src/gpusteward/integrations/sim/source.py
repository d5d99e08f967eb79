"""The simulated cluster as a ``Source``."""

from __future__ import annotations

from datetime import datetime

from gpusteward.domain.models import Observation
from gpusteward.integrations.sim.cluster import SimCluster


class SimSource:
    """Implements ``gpusteward.domain.ports.Source`` over a ``SimCluster``.

    The name defaults to the cluster's ``source_name``, which its workloads carry in
    ``Workload.source``; the two must agree.
    """

    def __init__(self, cluster: SimCluster, name: str | None = None) -> None:
        if name is not None and name != cluster.source_name:
            raise ValueError(f"source name {name!r} differs from the cluster's {cluster.source_name!r}")
        self.cluster = cluster
        self.name = cluster.source_name

    def observe(self, now: datetime) -> Observation:
        """Advance the cluster to ``now`` (starts, ends, pending stops) and sample it."""
        self.cluster.advance_to(now)
        return self.cluster.observe(now)

    def close(self) -> None:
        """Nothing to release: the cluster lives in memory."""
