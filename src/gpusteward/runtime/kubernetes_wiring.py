"""Wiring for ``source: kubernetes``: API client → source (pods + a metric source) → executor;
the Lease leadership; ``restore``.

The metric source is another entry of the ``SOURCES`` registry (``source.kubernetes.metrics``,
``prometheus`` by default), built with the same settings; its own executors are not used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.ports import Clock, Leadership, Notifier, Source, SystemClock
from gpusteward.execution.kubernetes import (
    EventNotifier,
    EventPoster,
    KubernetesExecutor,
    KubernetesPoolScaler,
    LeaseLeadership,
    restore,
)
from gpusteward.runtime.adapters import Adapters, no_history
from gpusteward.runtime.config import Settings
from gpusteward.sensing.kubernetes.api import KubeApi
from gpusteward.sensing.kubernetes.client import api_client, own_namespace
from gpusteward.sensing.kubernetes.model import KINDS, Protection, parse_workload_id
from gpusteward.sensing.kubernetes.source import KubernetesSource


@dataclass
class KubernetesParts:
    api: KubeApi
    source: KubernetesSource
    executor: KubernetesExecutor
    events: EventPoster
    scaler: KubernetesPoolScaler

    def notifier(self, inner: Notifier) -> Notifier:
        """``inner`` plus an Event on the pods of each Kubernetes workload a notice is about."""
        return EventNotifier(inner, self.events, lambda wid: self.source.last.get(wid))


def metric_source(settings: Settings, clock: Clock) -> Source:
    """The source named by ``source.kubernetes.metrics``, from the registry."""
    from gpusteward.runtime.wiring import SOURCES  # the registry imports this module

    name = settings.source.kubernetes.metrics
    factory = SOURCES.get(name)
    if factory is None or name in ("sim", "kubernetes", "slurm"):
        known = ", ".join(sorted(n for n in SOURCES if n not in ("sim", "kubernetes", "slurm")))
        raise ConfigError(f"source.kubernetes.metrics: unknown metric source {name!r}; known: {known}")
    return factory(settings, clock).source


def protection(settings: Settings) -> Protection:
    cfg = settings.source.kubernetes
    return Protection(
        allow=frozenset(cfg.namespaces),
        deny=frozenset(cfg.exclude_namespaces),
        own=own_namespace(cfg.agent_namespace),
    )


def build_kubernetes(
    settings: Settings,
    clock: Clock,
    *,
    client: Any = None,
    metrics: Source | None = None,
    executor_clock: Clock | None = None,
) -> KubernetesParts:
    """Everything the Kubernetes source needs; ``client`` / ``metrics`` replace the configured ones."""
    cfg = settings.source.kubernetes
    api = KubeApi(
        client if client is not None else api_client(cfg),
        timeout_s=cfg.request_timeout_seconds,
        page_size=cfg.list_page_size,
    )
    guard = protection(settings)
    source = KubernetesSource(
        api,
        metrics if metrics is not None else metric_source(settings, clock),
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
        eviction_grace_s=grace if grace is not None else math.ceil(settings.policy.ladder.stop_grace_seconds),
        force_delete_namespaces=cfg.force_delete_namespaces,
        conflict_retries=cfg.conflict_retries,
        refuse=guard.reason,
        events=events,
        clock=executor_clock or clock,
    )
    scaler = KubernetesPoolScaler(api, conflict_retries=cfg.conflict_retries)
    return KubernetesParts(api, source, executor, events, scaler)


def kubernetes_adapters(settings: Settings, clock: Clock) -> Adapters:
    """The ``SOURCES["kubernetes"]`` factory."""
    parts = build_kubernetes(settings, clock)
    return Adapters(
        source=parts.source, executors=[parts.executor], history=no_history, wrap_notifier=parts.notifier
    )


def lease_leadership(settings: Settings, *, client: Any = None, clock: Clock | None = None) -> Leadership:
    """``ha.leader_election: kubernetes-lease``: a coordination.k8s.io/v1 Lease."""
    ha, cfg = settings.ha, settings.source.kubernetes
    namespace = ha.lease_namespace or own_namespace(cfg.agent_namespace)
    if not namespace:
        raise ConfigError("ha.lease_namespace: empty, and this is not a pod (no POD_NAMESPACE): name one")
    api = KubeApi(client if client is not None else api_client(cfg), timeout_s=cfg.request_timeout_seconds)
    return LeaseLeadership(
        api,
        namespace=namespace,
        lease_name=ha.lease_name,
        lease_s=ha.lease_seconds,
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


def restore_workload(settings: Settings, target: str, *, client: Any = None) -> str:
    """Undo a scale-down (``gpusteward restore WORKLOAD``); says what it did."""
    res, ns, name = restore_target(target)
    cfg = settings.source.kubernetes
    api = KubeApi(client if client is not None else api_client(cfg), timeout_s=cfg.request_timeout_seconds)
    try:
        return restore(api, res, ns, name, retries=cfg.conflict_retries)
    finally:
        if client is None:
            api.api_client.close()
