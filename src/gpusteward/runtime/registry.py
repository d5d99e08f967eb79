"""The registry of integrations: a source name → its package's ``build``. Adding a system is its
own folder under ``integrations/``, its settings section under ``source:`` and one line here.

Scheduler integrations (Slurm, Kubernetes) join their jobs or pods with another integration's
metrics (``source.<name>.metrics``): the registry builds that one first and hands its source in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.integration import BuildContext, Integration
from gpusteward.domain.ports import Clock, Leadership, Source
from gpusteward.domain.store_ports import TickStore
from gpusteward.integrations.cloud import build as cloud
from gpusteward.integrations.cloud.interruption.build import build_watch
from gpusteward.integrations.kubernetes import build as kubernetes
from gpusteward.integrations.nvml import build as nvml
from gpusteward.integrations.prometheus import build as prometheus
from gpusteward.integrations.prometheus.remote_write import build as remote_write
from gpusteward.integrations.replay import build as replay
from gpusteward.integrations.sim import build as sim
from gpusteward.integrations.slurm import build as slurm
from gpusteward.runtime.config import Settings
from gpusteward.store.leadership import AlwaysLeader, PostgresLeadership

#: Source name → build(its settings section, context). The section is ``settings.source.<name>``.
REGISTRY: dict[str, Callable[[Any, BuildContext], Integration]] = {
    "sim": sim.build,
    "nvml": nvml.build,
    "prometheus": prometheus.build,
    "remote_write": remote_write.build,
    "slurm": slurm.build,
    "kubernetes": kubernetes.build,
    "replay": replay.build,
}
#: Integrations that own workloads and join another's metrics; any other may give them metrics.
SCHEDULERS = ("sim", "slurm", "kubernetes")


def build_context(settings: Settings, clock: Clock, *, metrics: Source | None = None) -> BuildContext:
    return BuildContext(
        clock=clock,
        tick_s=settings.tick_seconds,
        window_s=settings.store.window_minutes * 60,
        stop_grace_s=settings.policy.ladder.stop_grace_seconds,
        protected_users=tuple(settings.policy.protect.users),
        prices=settings.cost.with_prices,
        metrics=metrics,
    )


def metric_source(settings: Settings, clock: Clock, name: str, key: str) -> Source:
    """The source of the metric integration ``name`` (the value of config key ``key``)."""
    if name not in REGISTRY or name in SCHEDULERS:
        known = ", ".join(n for n in REGISTRY if n not in SCHEDULERS)
        raise ConfigError(f"{key}: unknown metric source {name!r}; known: {known}")
    return build_integration(settings, clock, name).source


def build_integration(settings: Settings, clock: Clock, name: str | None = None) -> Integration:
    """The integration ``name`` (default ``source.name``) built from its settings section."""
    name = name or settings.source.name
    build = REGISTRY.get(name)
    if build is None:
        raise ConfigError(f"unknown source {name!r}; known sources: {', '.join(sorted(REGISTRY))}")
    cfg = getattr(settings.source, name, None)
    metrics = None
    joined = getattr(cfg, "metrics", None)
    if isinstance(joined, str):
        metrics = metric_source(settings, clock, joined, f"source.{name}.metrics")
    ctx = build_context(settings, clock, metrics=metrics)
    integration = build(cfg, ctx)
    if integration.instances is None:  # the cloud under the nodes (cloud.provider), if any
        parts = cloud.build(settings.cloud, ctx, prices=settings.cost, node_ids=integration.node_ids)
        integration.instances = parts.instances
    if integration.interruptions is None:  # spot notices (cloud.interruption); a node agent's own too
        node, instances = getattr(cfg, "node", None), integration.instances
        integration.interruptions = build_watch(settings.cloud, clock, node=node, instances=instances)
    return integration


def build_leadership(
    settings: Settings, store: TickStore, integration: Integration | None = None
) -> Leadership:
    """The leadership ``ha.leader_election`` names: none, a PostgreSQL advisory lock on the state
    database, or a Lease through the Kubernetes integration (its own API client when the source
    is another system)."""
    ha = settings.ha
    if ha.leader_election == "none":
        return AlwaysLeader()
    if ha.leader_election == "postgres":
        return PostgresLeadership(
            settings.store.url, lease_name=ha.lease_name, lease_seconds=ha.lease_seconds
        )
    if integration is not None and integration.leadership is not None:
        return integration.leadership(ha.lease_namespace, ha.lease_name, ha.lease_seconds)
    return kubernetes.lease_leadership(
        settings.source.kubernetes, ha.lease_namespace, ha.lease_name, ha.lease_seconds
    )
