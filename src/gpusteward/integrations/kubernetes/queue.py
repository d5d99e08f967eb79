"""Kubernetes' queue (issue 16): GPU pods the scheduler cannot place, and how long placed ones waited.

Read from the pod watch cache the source already keeps (it lists every phase), so the queue costs
no API call. A pod waits for GPUs when it is ``Pending`` and its ``PodScheduled`` condition is
``False`` with reason ``Unschedulable`` (no node has a free ``nvidia.com/gpu``, or another of its
requests). Its queue is Kueue's ``kueue.x-k8s.io/queue-name`` label, else Volcano's
``scheduling.volcano.sh/queue-name`` annotation, else its namespace; nothing is asked of Kueue or
Volcano. Its model is the ``nvidia.com/gpu.product`` it selects (node selector, or a required node
affinity naming one product). Queue time of a placed pod: ``PodScheduled`` turning True minus its
creation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from gpusteward.domain.queue import PendingJob, Queue, StartedWait
from gpusteward.integrations.kubernetes.model import JsonObj, meta, parse_time, pod_info

PRODUCT_LABEL = "nvidia.com/gpu.product"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"


def _map(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def scheduled_condition(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod's ``PodScheduled`` condition (empty when the scheduler has not written one)."""
    for c in _list(_map(pod.get("status")).get("conditions")):
        if isinstance(c, Mapping) and c.get("type") == "PodScheduled":
            return c
    return {}


def queue_of(pod: Mapping[str, Any]) -> str:
    m = meta(pod)
    labels, annotations = _map(m.get("labels")), _map(m.get("annotations"))
    for value in (labels.get(KUEUE_QUEUE), annotations.get(VOLCANO_QUEUE)):
        if isinstance(value, str) and value:
            return value
    return str(m.get("namespace") or "")


def gpu_model_of(pod: Mapping[str, Any]) -> str:
    """The GPU product the pod is pinned to; "" when any will do or it allows several."""
    spec = _map(pod.get("spec"))
    selected = _map(spec.get("nodeSelector")).get(PRODUCT_LABEL)
    if isinstance(selected, str) and selected:
        return selected
    required = _map(
        _map(_map(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    # Terms are ORed: the pod is pinned to one product only if every term names the same single one.
    products: set[str] = set()
    for term in _list(required.get("nodeSelectorTerms")):
        named = [
            e
            for e in _list(_map(term).get("matchExpressions"))
            if isinstance(e, Mapping) and e.get("key") == PRODUCT_LABEL and e.get("operator") == "In"
        ]
        values = {str(v) for e in named for v in _list(e.get("values"))}
        if len(values) != 1:
            return ""
        products |= values
    return products.pop() if len(products) == 1 else ""


def _owner(m: Mapping[str, Any], keys: Sequence[str]) -> str:
    for source in (_map(m.get("annotations")), _map(m.get("labels"))):
        for k in keys:
            value = source.get(k)
            if isinstance(value, str) and value:
                return value
    return ""


def pending_pod(
    pod: JsonObj, owner_keys: Sequence[str] = (), source: str = "kubernetes"
) -> PendingJob | None:
    """The pod as a waiting job, or None when it is not an unschedulable GPU pod."""
    info = pod_info(pod)
    cond = scheduled_condition(pod)
    if info.phase != "Pending" or info.gpus <= 0 or info.deleting or info.node:
        return None
    if cond.get("status") != "False" or cond.get("reason") != "Unschedulable":
        return None
    m = meta(pod)
    created = parse_time(m.get("creationTimestamp"))
    if created is None:
        return None
    return PendingJob(
        id=info.key,
        queue=queue_of(pod),
        gpus=info.gpus,
        submitted_at=created,
        reason="Unschedulable",
        gpu_model=gpu_model_of(pod),
        user=_owner(m, owner_keys),
        source=source,
    )


def started_wait(pod: JsonObj, since: datetime) -> StartedWait | None:
    """How long a placed GPU pod waited, when it was placed at or after ``since``."""
    info = pod_info(pod)
    cond = scheduled_condition(pod)
    if info.gpus <= 0 or cond.get("status") != "True":
        return None
    placed, created = (
        parse_time(cond.get("lastTransitionTime")),
        parse_time(meta(pod).get("creationTimestamp")),
    )
    if placed is None or created is None or placed < since:
        return None
    return StartedWait(
        info.key, queue_of(pod), max(0.0, (placed - created).total_seconds()), placed, info.gpus
    )


def read_queue(
    pods: Iterable[JsonObj],
    now: datetime,
    *,
    lookback_s: float,
    owner_keys: Sequence[str] = (),
    namespaces: frozenset[str] = frozenset(),
    source: str = "kubernetes",
) -> Queue:
    """The queue of a pod list; ``namespaces``, when set, limits it to those the agent watches."""
    since = now - timedelta(seconds=lookback_s)
    pending: list[PendingJob] = []
    started: list[StartedWait] = []
    for pod in pods:
        if namespaces and meta(pod).get("namespace") not in namespaces:
            continue
        if (p := pending_pod(pod, owner_keys, source)) is not None:
            pending.append(p)
        elif (s := started_wait(pod, since)) is not None:
            started.append(s)
    return Queue(
        at=now,
        pending=tuple(sorted(pending, key=lambda p: (p.submitted_at, p.id))),
        started=tuple(sorted(started, key=lambda s: (s.started_at, s.id))),
    )


class PodSnapshot(Protocol):
    """The source's pod cache (``KubernetesSource``)."""

    def queue_pods(self) -> list[JsonObj]: ...


class KubernetesQueue:
    """``Integration.queue`` for Kubernetes, from the source's pod cache."""

    def __init__(
        self,
        pods: PodSnapshot,
        *,
        lookback_s: float = 3600.0,
        owner_keys: Sequence[str] = (),
        namespaces: Iterable[str] = (),
        source: str = "kubernetes",
    ) -> None:
        self.pods = pods
        self.lookback_s = lookback_s
        self.owner_keys = tuple(owner_keys)
        self.namespaces = frozenset(namespaces)
        self.source = source

    def __call__(self, now: datetime) -> Queue:
        return read_queue(
            self.pods.queue_pods(),
            now,
            lookback_s=self.lookback_s,
            owner_keys=self.owner_keys,
            namespaces=self.namespaces,
            source=self.source,
        )
