"""``source: sim`` → the simulated cluster's source, executor, node control and start-up history."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpusteward.domain.integration import BuildContext, Integration
from gpusteward.domain.models import Observation
from gpusteward.integrations.sim.cluster import SimCluster
from gpusteward.integrations.sim.executor import SimExecutor
from gpusteward.integrations.sim.node_control import SimNodeControl
from gpusteward.integrations.sim.settings import SimSourceSettings
from gpusteward.integrations.sim.source import SimSource


def build(cfg: SimSourceSettings, ctx: BuildContext) -> Integration:
    now = ctx.clock.now()
    cluster = SimCluster(
        nodes=cfg.nodes,
        gpus_per_node=cfg.gpus_per_node,
        seed=cfg.seed,
        start=now - timedelta(hours=cfg.history_hours),
        scenario=cfg.scenario,
        drop_rate=cfg.drop_rate,
    )
    source = SimSource(cluster)

    def history(start: datetime, end: datetime, step_s: float) -> list[Observation]:
        out = []
        t = max(start, cluster.start)
        while t < end:
            out.append(source.observe(t))
            t += timedelta(seconds=step_s)
        return out

    return Integration(
        name="sim",
        source=source,
        executors=[SimExecutor(cluster)],
        history=history,
        node_control=SimNodeControl(cluster),
        queue=cluster.queue,
        ground_truth=cluster,
    )
