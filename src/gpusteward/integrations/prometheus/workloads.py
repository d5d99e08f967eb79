"""The holders the series name, as gpusteward's workloads: one per pod or job, with the GPUs it
holds. Pure, like ``assemble``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType

from gpusteward.domain.classes import CLASS_KEY
from gpusteward.domain.models import Owner, Workload, WorkloadKind
from gpusteward.integrations.prometheus.parse import Holder

_NO_LABELS: Mapping[str, str] = MappingProxyType({})


def build_workloads(
    holders: Mapping[str, Holder | None],
    started: Mapping[str, datetime],
    node_of: Mapping[str, str],
    default_class: str = "unknown",
) -> tuple[Workload, ...]:
    """One workload per holder, with the GPUs it holds. ``started`` must name every holder.
    A pod gets ``default_class`` (the series say nothing of its owner's kind)."""
    pod_labels = _NO_LABELS if default_class == "unknown" else MappingProxyType({CLASS_KEY: default_class})
    grouped: dict[str, tuple[Holder, list[str]]] = {}
    for uuid, h in holders.items():
        if h is not None:
            grouped.setdefault(h.id, (h, []))[1].append(uuid)
    out = []
    for wid, (h, uuids) in sorted(grouped.items()):
        uuids.sort()
        ref = {"node": node_of.get(uuids[0], "")}
        if h.kind is WorkloadKind.POD:
            ref.update(namespace=h.namespace, pod=h.name, container=h.container)
            if h.pod_uid:
                ref["pod_uid"] = h.pod_uid
        else:
            ref["job_id"] = h.name
        out.append(
            Workload(
                id=wid,
                kind=h.kind,
                name=h.name,
                owner=Owner(user=h.user, team=h.namespace),
                gpus_requested=len(uuids),
                gpu_uuids=tuple(uuids),
                started_at=started[wid],
                source="prometheus",
                labels=pod_labels if h.kind is WorkloadKind.POD else _NO_LABELS,
                annotations=_NO_LABELS,
                ref=MappingProxyType(ref),
            )
        )
    return tuple(out)
