"""``source: sim`` → the simulated cluster's source, executor, node control and start-up history;
with ``cloud_nodes``, the instances under its nodes and their spot interruptions too."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpusteward.analysis.cost import DEFAULT_RESERVED_DISCOUNT, DEFAULT_SPOT_DISCOUNT
from gpusteward.domain.cloud import Lifecycle
from gpusteward.domain.integration import BuildContext, Integration
from gpusteward.domain.models import Observation
from gpusteward.domain.ports import Source
from gpusteward.integrations.sim.cloud import CloudPlan, CloudSource, SimCloud, SimInstanceControl
from gpusteward.integrations.sim.cluster import SimCluster
from gpusteward.integrations.sim.executor import SimExecutor
from gpusteward.integrations.sim.node_control import SimNodeControl
from gpusteward.integrations.sim.settings import SimSourceSettings
from gpusteward.integrations.sim.source import SimSource
from gpusteward.integrations.sim.spot import SimInterruptions


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
    source: Source = SimSource(cluster)
    instances = interruptions = None
    if cfg.cloud_nodes:
        cloud = SimCloud(cluster, cloud_plan(cfg, ctx, cluster))
        instances = SimInstanceControl(cloud)
        interruptions = SimInterruptions(
            cloud, per_day=cfg.interruptions_per_day, replacement_s=cfg.spot_replacement_minutes * 60
        )
        source = CloudSource(SimSource(cluster))

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
        instances=instances,
        interruptions=interruptions,
        ground_truth=cluster,
    )


def cloud_plan(cfg: SimSourceSettings, ctx: BuildContext, cluster: SimCluster) -> CloudPlan:
    """The nodes' instances, priced from the cost table: its price of the cluster's GPU (at the
    configured rate, on-demand unless set) for on-demand, less the table's default discounts for
    reserved and spot (``BuildContext`` carries no per-rate prices)."""
    (gpu,) = ctx.prices(cluster.gpus[:1])
    on_demand = gpu.price_per_hour
    prices = {
        Lifecycle.ON_DEMAND: on_demand,
        Lifecycle.RESERVED: on_demand * (1 - DEFAULT_RESERVED_DISCOUNT),
        Lifecycle.SPOT: on_demand * (1 - DEFAULT_SPOT_DISCOUNT),
    }
    return CloudPlan(cfg.instance_type, cfg.spot_share, cfg.reserved_share, prices)
