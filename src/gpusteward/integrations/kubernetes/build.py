"""``source: kubernetes`` → one API client (the choke point) → source (pods joined with
``ctx.metrics``), executor, node control, pool scaler, Lease leadership; and ``restore``.

The metric source is another integration (``source.kubernetes.metrics``, ``prometheus`` by
default) that the registry builds and hands in; its own executors are not used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.integration import BuildContext, Integration
from gpusteward.domain.ports import Clock, Leadership, Notifier, SystemClock
from gpusteward.integrations.kubernetes.client import api_client, own_namespace
from gpusteward.integrations.kubernetes.consolidate import (
    ORIGINAL_GPU_KEY,
    ConsolidationExecutor,
    ConsolidationMover,
)
from gpusteward.integrations.kubernetes.control import ORIGINAL_REPLICAS_KEY, annotations_of
from gpusteward.integrations.kubernetes.events import EventNotifier, EventPoster
from gpusteward.integrations.kubernetes.executor import KubernetesExecutor, restore
from gpusteward.integrations.kubernetes.kubeapi import KubeApi
from gpusteward.integrations.kubernetes.leadership import LeaseLeadership
from gpusteward.integrations.kubernetes.model import KINDS, Protection, parse_workload_id
from gpusteward.integrations.kubernetes.node_control import KubernetesNodeControl
from gpusteward.integrations.kubernetes.pool_scaler import KubernetesPoolScaler
from gpusteward.integrations.kubernetes.queue import KubernetesQueue
from gpusteward.integrations.kubernetes.scale_floor import ScaleFloor
from gpusteward.integrations.kubernetes.settings import KubernetesSourceSettings
from gpusteward.integrations.kubernetes.source import KubernetesSource


@dataclass
class KubernetesParts:
    api: KubeApi
    source: KubernetesSource
    executor: KubernetesExecutor
    events: EventPoster
    scaler: KubernetesPoolScaler
    mover: ConsolidationMover

    def notifier(self, inner: Notifier) -> Notifier:
        """``inner`` plus an Event on the pods of each Kubernetes workload a notice is about."""
        return EventNotifier(inner, self.events, lambda wid: self.source.last.get(wid))


def protection(cfg: KubernetesSourceSettings) -> Protection:
    return Protection(
        allow=frozenset(cfg.namespaces),
        deny=frozenset(cfg.exclude_namespaces),
        own=own_namespace(cfg.agent_namespace),
        floor=ScaleFloor(wake_to=cfg.scale_to_replicas, min_replicas=cfg.min_replicas),
    )


def kube_api(cfg: KubernetesSourceSettings, client: Any = None) -> KubeApi:
    """The one ``KubeApi`` of a process (its choke point), from ``source.kubernetes``; ``client``
    replaces the configured API client (tests, the fake API server)."""
    return KubeApi(
        client if client is not None else api_client(cfg),
        timeout_s=cfg.request_timeout_seconds,
        page_size=cfg.list_page_size,
    )


def build_kubernetes(
    cfg: KubernetesSourceSettings,
    ctx: BuildContext,
    *,
    client: Any = None,
    executor_clock: Clock | None = None,
) -> KubernetesParts:
    """Everything the Kubernetes source needs; its metrics come from ``ctx.metrics``."""
    if ctx.metrics is None:
        raise ConfigError("source.kubernetes: the kubernetes source needs a metric source (its metrics key)")
    clock = ctx.clock
    api = kube_api(cfg, client)
    guard = protection(cfg)
    source = KubernetesSource(
        api,
        ctx.metrics,
        protection=guard,
        owner_keys=cfg.owner_keys,
        resync_s=cfg.resync_seconds,
        sync_wait_s=cfg.request_timeout_seconds,
    )
    events = EventPoster(api, clock=executor_clock or clock)
    grace = cfg.eviction_grace_seconds
    executor = KubernetesExecutor(
        api,
        source.fresh,
        source=source.name,
        scale_to=cfg.scale_to_replicas,
        eviction_grace_s=grace if grace is not None else math.ceil(ctx.stop_grace_s),
        force_delete_namespaces=cfg.force_delete_namespaces,
        conflict_retries=cfg.conflict_retries,
        refuse=guard.reason,
        events=events,
        clock=executor_clock or clock,
    )
    scaler = KubernetesPoolScaler(api, conflict_retries=cfg.conflict_retries)
    mover = ConsolidationMover(
        api,
        source.fresh,
        source=source.name,
        conflict_retries=cfg.conflict_retries,
        refuse=guard.reason,
        clock=executor_clock or clock,
    )
    return KubernetesParts(api, source, executor, events, scaler, mover)


def build(cfg: KubernetesSourceSettings, ctx: BuildContext) -> Integration:
    parts = build_kubernetes(cfg, ctx)
    nodes = KubernetesNodeControl(
        parts.api, conflict_retries=cfg.conflict_retries, monotonic=ctx.clock.monotonic
    )
    return Integration(
        name="kubernetes",
        source=parts.source,
        executors=[parts.executor, parts.mover],
        node_control=nodes,
        node_ids=nodes.provider_ids,
        pool_scaler=parts.scaler,
        leadership=lambda namespace, name, lease_s: lease_leadership(
            cfg, namespace, name, lease_s, api=parts.api, clock=ctx.clock
        ),
        wrap_notifier=parts.notifier,
        queue=kubernetes_queue(cfg, parts) if cfg.queue else None,
        parts=parts,
    )


def kubernetes_queue(cfg: KubernetesSourceSettings, parts: KubernetesParts) -> KubernetesQueue:
    """The queue from the source's pod cache, in the namespaces the agent watches."""
    return KubernetesQueue(
        parts.source,
        lookback_s=cfg.queue_lookback_seconds,
        owner_keys=cfg.owner_keys,
        namespaces=cfg.namespaces,
        source=parts.source.name,
    )


def lease_leadership(
    cfg: KubernetesSourceSettings,
    namespace: str,
    lease_name: str,
    lease_s: float,
    *,
    api: KubeApi | None = None,
    client: Any = None,
    clock: Clock | None = None,
) -> Leadership:
    """``ha.leader_election: kubernetes-lease``: a coordination.k8s.io/v1 Lease in ``namespace``
    (empty: the agent's own)."""
    namespace = namespace or own_namespace(cfg.agent_namespace)
    if not namespace:
        raise ConfigError("ha.lease_namespace: empty, and this is not a pod (no POD_NAMESPACE): name one")
    return LeaseLeadership(
        api or kube_api(cfg, client),
        namespace=namespace,
        lease_name=lease_name,
        lease_s=lease_s,
        clock=clock or SystemClock(),
    )


def restore_target(target: str) -> tuple[tuple[str, str, str, bool], str, str]:
    """``k8s:ns/deployment/name`` or ``ns/deployment/name`` → (resource, namespace, name)."""
    parsed = parse_workload_id(target if target.startswith("k8s:") else f"k8s:{target}")
    if parsed is None:
        raise ConfigError(f"{target!r}: expected a workload like k8s:<namespace>/<kind>/<name>")
    ns, kind, name = parsed
    for known in KINDS.values():
        if known.kind.lower() == kind and known.mode.value in ("scale", "notebook"):
            return tuple(known.resource), ns, name  # type: ignore[return-value]
    scalable = ", ".join(
        sorted(k.kind.lower() for k in KINDS.values() if k.mode.value in ("scale", "notebook"))
    )
    raise ConfigError(f"{target!r}: {kind} workloads are not scaled down; restorable kinds: {scalable}")


def restore_workload(cfg: KubernetesSourceSettings, target: str, *, client: Any = None) -> str:
    """Undo a scale-down and/or a consolidation move (``gpusteward restore WORKLOAD``): whatever
    gpusteward's annotations on the object record; says what it did."""
    res, ns, name = restore_target(target)
    api = kube_api(cfg, client)
    try:
        moves = ConsolidationExecutor(api)
        if ORIGINAL_GPU_KEY not in annotations_of(moves.get(res, ns, name)):
            return restore(api, res, ns, name, retries=cfg.conflict_retries)
        said = [moves.restore(res, ns, name, retries=cfg.conflict_retries)]
        if ORIGINAL_REPLICAS_KEY in annotations_of(moves.get(res, ns, name)):
            said.append(restore(api, res, ns, name, retries=cfg.conflict_retries))
        return "; ".join(said)
    finally:
        if client is None:
            api.api_client.close()
