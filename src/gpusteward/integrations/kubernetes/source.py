"""The ``kubernetes`` source: GPU pods from the API, GPUs and samples from a metric source.

Pods come from a watch cache (list once, watch, re-list on resync); each GPU pod is grouped
with the other pods of its unit (see ``model.unit_of``) into one workload. Its GPUs are the
ones the metric source says the pod holds: by pod UID where the metric source knows it,
else by namespace and pod name (dcgm-exporter's ``pod``/``namespace`` labels, or those of
``gpusteward exporter``). GPUs a pod requests but no metric names get placeholders without
samples, so the workload is never judged on the GPUs that happen to be measured.

Either side failing fails the observation (``SourceError``): pods without a current view,
or GPUs without fresh samples, must not be judged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from gpusteward.domain.errors import SourceError
from gpusteward.domain.models import Gpu, Observation, Workload, WorkloadKind
from gpusteward.domain.ports import Clock, Source, SystemClock
from gpusteward.integrations.kubernetes.cache import WatchCache
from gpusteward.integrations.kubernetes.kubeapi import PODS, KubeApi
from gpusteward.integrations.kubernetes.model import (
    JsonObj,
    PodInfo,
    Protection,
    build_workload,
    meta,
    pod_info,
    unit_of,
)
from gpusteward.integrations.kubernetes.owners import OwnerResolver
from gpusteward.integrations.kubernetes.podref import pods_of

log = logging.getLogger(__name__)


class KubernetesSource:
    """Implements ``Source``: workloads from the API, GPUs and samples from ``metrics``."""

    def __init__(
        self,
        api: KubeApi,
        metrics: Source,
        *,
        name: str = "kubernetes",
        protection: Protection | None = None,
        owner_keys: Sequence[str] = ("gpusteward.io/owner",),
        resync_s: float = 300.0,
        sync_wait_s: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.api = api
        self.metrics = metrics
        self.protection = protection or Protection()
        self.owner_keys = tuple(owner_keys)
        self.sync_wait_s = sync_wait_s
        clock = clock or SystemClock()
        self.pods = WatchCache(
            "pods",
            lambda: api.list(PODS),
            lambda rv, t: api.watch(PODS, rv, t),
            resync_s=resync_s,
            clock=clock,
        )
        self.owners = OwnerResolver(api, clock, ttl_s=resync_s, pod_lookup=self._pod_by_name)
        self._by_name: dict[tuple[str, str], JsonObj] = {}
        #: GPU uuids by pod UID and by (namespace, pod), from the last metric observation.
        self._uuids_by_uid: dict[str, tuple[str, ...]] = {}
        self._uuids_by_name: dict[tuple[str, str], tuple[str, ...]] = {}
        self._gpus: dict[str, Gpu] = {}
        self.last: dict[str, Workload] = {}
        self._started = False

    def start(self) -> None:
        if not self._started:
            self.pods.start()
            self._started = True

    def close(self) -> None:
        self.pods.stop()
        self.metrics.close()

    def _pod_by_name(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._by_name.get((namespace, name))

    # -- the join -----------------------------------------------------------------------

    def _remember(self, obs: Observation) -> None:
        by_uid: dict[str, list[str]] = {}
        by_name: dict[tuple[str, str], list[str]] = {}
        for w in obs.workloads:
            if w.kind is not WorkloadKind.POD:
                continue
            uid = w.ref.get("pod_uid") or w.labels.get("pod_uid", "")
            if uid:
                by_uid.setdefault(uid, []).extend(w.gpu_uuids)
            ns, pod = w.ref.get("namespace", ""), w.ref.get("pod", "")
            if pod:
                by_name.setdefault((ns, pod), []).extend(w.gpu_uuids)
        self._uuids_by_uid = {k: tuple(dict.fromkeys(v)) for k, v in by_uid.items()}
        self._uuids_by_name = {k: tuple(dict.fromkeys(v)) for k, v in by_name.items()}
        self._gpus = {g.uuid: g for g in obs.gpus}

    def pod_gpus(self, pod: PodInfo) -> tuple[list[str], list[Gpu]]:
        """The pod's GPU uuids, and placeholders for the ones no metric names."""
        known = self._uuids_by_uid.get(pod.uid) or self._uuids_by_name.get((pod.namespace, pod.name))
        uuids = list(known or ())
        placeholders = [
            Gpu(f"k8s:{pod.node}:{pod.uid}:{k}", pod.node or "?", -1, "unknown", 0.0)
            for k in range(len(uuids), pod.gpus)
        ]
        return uuids + [g.uuid for g in placeholders], placeholders

    # -- workloads ----------------------------------------------------------------------

    def _group(self, pods: Iterable[tuple[PodInfo, JsonObj]]) -> tuple[list[Workload], list[Gpu], list[str]]:
        units: dict[str, tuple[Any, Any, list[Any], list[PodInfo]]] = {}
        problems: list[str] = []
        for info, obj in pods:
            chain, problem = self.owners.chain(info, obj)
            if problem:
                problems.append(problem)
            unit, mode = unit_of(chain)
            key = f"{info.namespace}/{unit.kind}/{unit.name}/{unit.uid}"
            units.setdefault(key, (unit, mode, chain, []))[3].append(info)
        workloads, extra = [], []
        for unit, mode, chain, members in units.values():
            members.sort(key=lambda p: p.name)
            uuids: list[str] = []
            for p in members:
                ids, placeholders = self.pod_gpus(p)
                uuids.extend(ids)
                extra.extend(placeholders)
            workloads.append(
                build_workload(
                    unit,
                    mode,
                    chain,
                    members,
                    list(dict.fromkeys(uuids)),
                    source=self.name,
                    protection=self.protection,
                    owner_keys=self.owner_keys,
                )
            )
        return workloads, extra, problems

    def gpu_pods(self) -> list[tuple[PodInfo, JsonObj]]:
        objs = self.pods.snapshot()
        self._by_name = {(meta(o).get("namespace", ""), meta(o).get("name", "")): o for o in objs}
        out = []
        for o in objs:
            info = pod_info(o)
            if info.holds_gpus:
                out.append((info, o))
        return out

    def queue_pods(self) -> list[JsonObj]:
        """Every pod of the cache, in any phase (the queue's input); ``SourceError`` without a
        current view."""
        self.start()
        try:
            self.pods.check(self.sync_wait_s)
        except SourceError as e:
            raise SourceError(f"kubernetes queue: {e}") from e
        return self.pods.snapshot()

    def observe(self, now: datetime) -> Observation:
        self.start()
        obs = self.metrics.observe(now)
        self.pods.check(self.sync_wait_s)
        self._remember(obs)
        workloads, placeholders, problems = self._group(self.gpu_pods())
        self.last = {w.id: w for w in workloads}
        gpus = {g.uuid: g for g in obs.gpus}
        for g in placeholders:
            gpus.setdefault(g.uuid, g)
        return Observation(
            at=now,
            gpus=tuple(gpus.values()),
            samples=obs.samples,
            workloads=tuple(sorted(workloads, key=lambda w: w.id)),
            errors=(*obs.errors, *problems[:20]),
        )

    # -- pre-flight ---------------------------------------------------------------------

    def fresh(self, workload: Workload) -> Workload | None:
        """The workload re-read from the API now (its pods by name, same UIDs), or None when gone.

        Raises ``SourceError`` when the API cannot be read: nothing is done blind.
        """
        live: list[tuple[PodInfo, JsonObj]] = []
        for name, uid in pods_of(workload.ref):
            reply = self.api.get(PODS, workload.ref.get("namespace", ""), name)
            if reply.status == 404:
                continue
            if not reply.ok:
                raise SourceError(f"get pod {name}: HTTP {reply.status}: {reply.message}")
            info = pod_info(reply.body)
            if info.uid == uid and info.holds_gpus:
                live.append((info, reply.body))
        if not live:
            return None
        self.owners.forget()  # read the owners afresh too: a recreated owner is another workload
        workloads, _, problems = self._group(live)
        if problems:
            raise SourceError("; ".join(problems))
        same = [w for w in workloads if w.id == workload.id and w.ref.get("uid") == workload.ref.get("uid")]
        return same[0] if same else None
