"""What the loop keeps of each observation beside the window: the running workloads by id and
each GPU's holder.

A source hands back the same GPU and workload tuples while nothing changes (the Prometheus and
remote-write sources do), so a steady tick builds neither map again: at 10,000 GPUs that was
two passes over every GPU and workload a tick, and the window compares the holders it is given
with the last ones it applied, which the same map passes at once.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpusteward.domain.models import Gpu, Observation, Workload


class HolderMap:
    """``of(obs)``: (workloads by id, GPU uuid → holding workload id or ""); the same two maps,
    which nobody changes, for as long as the observations carry the same tuples."""

    def __init__(self) -> None:
        self._made_from: tuple[tuple[Gpu, ...], tuple[Workload, ...]] | None = None
        self._maps: tuple[Mapping[str, Workload], Mapping[str, str]] = ({}, {})

    def of(self, obs: Observation) -> tuple[Mapping[str, Workload], Mapping[str, str]]:
        made = self._made_from
        if made is None or made[0] is not obs.gpus or made[1] is not obs.workloads:
            held = {uuid: w.id for w in obs.workloads for uuid in w.gpu_uuids}
            workloads = {w.id: w for w in obs.workloads}
            self._maps = (workloads, {g.uuid: held.get(g.uuid, "") for g in obs.gpus})
            self._made_from = (obs.gpus, obs.workloads)
        return self._maps
