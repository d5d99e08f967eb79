"""Owner chains: Pod → ReplicaSet → Deployment, Pod → Job → CronJob, Pod → StatefulSet → Notebook.

Owners are read with GET (never watched: they change rarely and there are many kinds) and kept
for the resync period, keyed by uid so a recreated owner is read afresh. An owner that cannot
be read ends the chain where it is (its problem is reported), so its pods are still seen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpusteward.domain.errors import SourceError
from gpusteward.domain.ports import Clock
from gpusteward.integrations.kubernetes.kubeapi import PODS, KubeApi
from gpusteward.integrations.kubernetes.model import (
    KINDS,
    JsonObj,
    Kind,
    Link,
    Mode,
    PodInfo,
    controller_ref,
    group_of,
    meta,
)

MAX_DEPTH = 8
#: A pod owning a workload's pods (a LeaderWorkerSet leader owns its workers' StatefulSet).
POD_OWNER = Kind(PODS, "Pod", Mode.WALK)


class OwnerResolver:
    def __init__(
        self,
        api: KubeApi,
        clock: Clock,
        *,
        ttl_s: float,
        pod_lookup: Callable[[str, str], Mapping[str, Any] | None] | None = None,
    ) -> None:
        self.api = api
        self.clock = clock
        self.ttl_s = ttl_s
        self.pod_lookup = pod_lookup
        self._cache: dict[tuple[str, str, str, str], tuple[float, JsonObj | None]] = {}
        #: GETs sent (tests check that owners are not re-read every tick).
        self.reads = 0

    def _fetch(self, ref: Mapping[str, Any], namespace: str) -> tuple[JsonObj | None, str]:
        kind = str(ref.get("kind", ""))
        group = group_of(str(ref.get("apiVersion", "")))
        name, uid = str(ref.get("name", "")), str(ref.get("uid", ""))
        if group == "" and kind == "Pod" and self.pod_lookup is not None:
            pod = self.pod_lookup(namespace, name)
            return (dict(pod) if pod is not None else None), ""
        known = KINDS.get((group, kind))
        if known is None:
            return None, ""
        key = (group, kind, namespace, name)
        now = self.clock.monotonic()
        hit = self._cache.get(key)
        fresh = hit is not None and now - hit[0] < self.ttl_s
        if hit is not None and fresh and (hit[1] is None or meta(hit[1]).get("uid") == uid):
            return hit[1], ""
        self.reads += 1
        try:
            reply = self.api.get(known.resource, namespace, name)
        except SourceError as e:
            return None, str(e)
        if reply.status == 404:
            self._cache[key] = (now, None)
            return None, ""
        if not reply.ok:
            return None, f"get {kind} {namespace}/{name}: HTTP {reply.status}: {reply.message}"
        self._cache[key] = (now, reply.body)
        return reply.body, ""

    def chain(self, pod: PodInfo, pod_obj: Mapping[str, Any]) -> tuple[list[Link], str]:
        """The pod and its owners, bottom up, and a problem met on the way ("" when none)."""
        links = [Link("Pod", pod.name, pod.uid, "v1", None, pod_obj)]
        obj_meta = meta(pod_obj)
        seen = {pod.uid}
        for _ in range(MAX_DEPTH):
            ref = controller_ref(obj_meta)
            if ref is None:
                break
            kind, api_version = str(ref.get("kind", "")), str(ref.get("apiVersion", ""))
            name, uid = str(ref.get("name", "")), str(ref.get("uid", ""))
            if uid in seen:
                break
            seen.add(uid)
            if kind == "Node":
                links.append(Link(kind, name, uid, api_version, None))
                break
            pod_owner = (kind, api_version) == ("Pod", "v1")
            known = POD_OWNER if pod_owner else KINDS.get((group_of(api_version), kind))
            obj, problem = self._fetch(ref, pod.namespace)
            if problem:
                return links, problem
            if obj is None:
                if known is None and kind != "Pod":
                    links.append(Link(kind, name, uid, api_version, None))
                break  # the owner is gone: its pods are orphans, stopped as themselves
            links.append(Link(kind, name, uid, api_version, known, obj))
            obj_meta = meta(obj)
        return links, ""

    def forget(self) -> None:
        self._cache.clear()
