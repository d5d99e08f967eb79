"""Pure mapping of Kubernetes objects (plain JSON dicts) to gpusteward's vocabulary.

A GPU pod is a running pod whose containers ask for ``nvidia.com/gpu`` or a MIG profile
(``nvidia.com/mig-1g.10gb``...). Pods are grouped by the *unit* gpusteward acts on: the
top of their owner chain that can be stopped as a whole (a Deployment, not its
ReplicaSet; a Notebook, not its StatefulSet; a Job, not its CronJob). Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from gpusteward.domain.models import (
    EXCLUDE_UNTIL_KEY,
    PROTECT_KEY,
    Owner,
    Workload,
    WorkloadKind,
)
from gpusteward.integrations.kubernetes.kubeapi import Resource
from gpusteward.integrations.kubernetes.podref import PODS_KEY, encode_pods
from gpusteward.integrations.kubernetes.scale_floor import FLOOR_REF, ScaleFloor, at_floor, replicas_of

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
#: Time-slicing with ``renameByDefault``: a share of a GPU, still a GPU pod (consolidation moves).
SHARED_RESOURCE = "nvidia.com/gpu.shared"
PROTECT_REASON_KEY = "gpusteward.io/protect-reason"
OWNER_CHAIN_KEY = "gpusteward.io/owner-chain"
ALWAYS_EXCLUDED = ("kube-system",)

JsonObj = dict[str, Any]


class Mode(StrEnum):
    """How gpusteward stops a unit."""

    #: Walk on up (a ReplicaSet belongs to its Deployment).
    WALK = "walk"
    #: Set ``spec.replicas`` (Deployment, StatefulSet, LeaderWorkerSet).
    SCALE = "scale"
    #: Kubeflow's ``kubeflow-resource-stopped`` annotation.
    NOTEBOOK = "notebook"
    #: Evict its pods (bare pods, Jobs): PodDisruptionBudgets are honoured.
    EVICT = "evict"
    #: Read and reported, notices only (InferenceService, unknown controllers).
    NOTICE = "notice"
    #: Never acted on (DaemonSets, static pods).
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class Kind:
    resource: Resource
    kind: str
    mode: Mode
    #: A parent that is recorded in the chain but is not the unit (a CronJob above its Job).
    unit: bool = True


def _k(group: str, version: str, plural: str, kind: str, mode: Mode, unit: bool = True) -> Kind:
    return Kind(Resource(group, version, plural), kind, mode, unit)


#: Owner kinds gpusteward knows, by (API group, kind). Custom resources are read unstructured.
KINDS: Mapping[tuple[str, str], Kind] = MappingProxyType(
    {
        ("apps", "ReplicaSet"): _k("apps", "v1", "replicasets", "ReplicaSet", Mode.WALK),
        ("apps", "Deployment"): _k("apps", "v1", "deployments", "Deployment", Mode.SCALE),
        ("apps", "StatefulSet"): _k("apps", "v1", "statefulsets", "StatefulSet", Mode.SCALE),
        ("apps", "DaemonSet"): _k("apps", "v1", "daemonsets", "DaemonSet", Mode.NEVER),
        ("batch", "Job"): _k("batch", "v1", "jobs", "Job", Mode.EVICT),
        ("batch", "CronJob"): _k("batch", "v1", "cronjobs", "CronJob", Mode.EVICT, unit=False),
        ("kubeflow.org", "Notebook"): _k("kubeflow.org", "v1", "notebooks", "Notebook", Mode.NOTEBOOK),
        ("serving.kserve.io", "InferenceService"): _k(
            "serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService", Mode.NOTICE
        ),
        ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): _k(
            "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", Mode.SCALE
        ),
    }
)


def group_of(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def _map(v: Any) -> Mapping[str, Any]:
    """``v`` when it is an object, else empty: a field of the wrong shape reads as absent
    (a pod that fails the schema must not take the whole observation down)."""
    return v if isinstance(v, Mapping) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _str_map(v: Any) -> dict[str, str]:
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, Mapping) else {}


def parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _count(q: Any) -> int:
    """A GPU quantity ("1", 2): extended resources are whole numbers."""
    try:
        return max(0, int(str(q)))  # a negative count holds nothing
    except ValueError:
        return 0


def _container_gpus(c: Mapping[str, Any]) -> tuple[int, tuple[str, ...]]:
    res = _map(c.get("resources"))
    # Extended resources must be limited (requests default to the limit, or equal it).
    amounts = {**_map(res.get("requests")), **_map(res.get("limits"))}
    names = tuple(
        sorted(
            k
            for k in amounts
            if isinstance(k, str) and (k in (GPU_RESOURCE, SHARED_RESOURCE) or k.startswith(MIG_PREFIX))
        )
    )
    return sum(_count(amounts[k]) for k in names), names


def gpu_request(pod: Mapping[str, Any]) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    """GPUs the pod holds, the GPU resource names, and the containers asking for them.

    Like the scheduler: the larger of the containers' sum and the largest init container.
    """
    spec = _map(pod.get("spec"))
    total, names, containers = 0, set[str](), []
    for c in _list(spec.get("containers")):
        if not isinstance(c, Mapping):
            continue
        n, kinds = _container_gpus(c)
        if n:
            total += n
            names.update(kinds)
            containers.append(str(c.get("name", "")))
    init = 0
    for c in _list(spec.get("initContainers")):
        if not isinstance(c, Mapping):
            continue
        n, kinds = _container_gpus(c)
        if n:
            init = max(init, n)
            names.update(kinds)
    return max(total, init), tuple(sorted(names)), tuple(containers)


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What gpusteward needs of one pod."""

    namespace: str
    name: str
    uid: str
    node: str
    phase: str
    started_at: datetime | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    gpus: int
    gpu_resources: tuple[str, ...]
    containers: tuple[str, ...]
    owner_refs: tuple[Mapping[str, Any], ...]
    deleting: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holds_gpus(self) -> bool:
        """Running on a node, not being deleted, with GPUs: it holds them now."""
        return self.gpus > 0 and self.phase == "Running" and bool(self.node) and not self.deleting


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    m = meta(pod)
    spec = _map(pod.get("spec"))
    status = _map(pod.get("status"))
    gpus, names, containers = gpu_request(pod)
    refs = tuple(r for r in _list(m.get("ownerReferences")) if isinstance(r, Mapping))
    return PodInfo(
        namespace=str(m.get("namespace", "")),
        name=str(m.get("name", "")),
        uid=str(m.get("uid", "")),
        node=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or ""),
        started_at=parse_time(status.get("startTime")) or parse_time(m.get("creationTimestamp")),
        labels=MappingProxyType(_str_map(m.get("labels"))),
        annotations=MappingProxyType(_str_map(m.get("annotations"))),
        gpus=gpus,
        gpu_resources=names,
        containers=containers,
        owner_refs=refs,
        deleting=bool(m.get("deletionTimestamp")),
    )


def controller_ref(obj_meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The managing owner (``controller: true``), else the only owner, else None."""
    refs = [r for r in _list(obj_meta.get("ownerReferences")) if isinstance(r, Mapping)]
    ctrl = [r for r in refs if r.get("controller")]
    if ctrl:
        return ctrl[0]
    return refs[0] if len(refs) == 1 else None


@dataclass(frozen=True, slots=True)
class Link:
    """One object of an owner chain as it was read."""

    kind: str
    name: str
    uid: str
    api_version: str
    known: Kind | None
    obj: Mapping[str, Any] = field(default_factory=dict)


def chain_text(chain: Sequence[Link]) -> str:
    return " <- ".join(f"{link.kind}/{link.name}" for link in chain)


def unit_of(chain: Sequence[Link]) -> tuple[Link, Mode]:
    """The link gpusteward acts on, and how: the topmost one that can be a unit.

    ``chain[0]`` is the pod. An unknown owner kind (a RayCluster, an Argo Workflow) becomes a
    notice-only unit: evicting its pods would only make its controller start them again.
    """
    unit, mode = chain[0], Mode.EVICT
    if chain[0].kind == "Node" or (len(chain) > 1 and chain[1].kind == "Node"):
        return chain[0], Mode.NEVER  # a static (mirror) pod: the kubelet owns it
    for link in chain[1:]:
        if link.known is None:
            return link, Mode.NOTICE
        if link.known.mode is Mode.WALK or not link.known.unit:
            continue
        unit, mode = link, link.known.mode
    return unit, mode


@dataclass(frozen=True, slots=True)
class Protection:
    """Namespaces gpusteward never acts in."""

    allow: frozenset[str] = frozenset()
    deny: frozenset[str] = frozenset()
    own: str = ""
    #: How far a scaled unit may go: a service at its floor is protected too.
    floor: ScaleFloor = field(default_factory=ScaleFloor)

    def reason(self, namespace: str) -> str | None:
        if namespace in ALWAYS_EXCLUDED:
            return f"namespace {namespace} is never touched"
        if self.own and namespace == self.own:
            return f"namespace {namespace} is gpusteward's own"
        if namespace in self.deny:
            return f"namespace {namespace} is on the exclude list"
        if self.allow and namespace not in self.allow:
            return f"namespace {namespace} is not on the namespaces list"
        return None


def workload_id(namespace: str, kind: str, name: str) -> str:
    return f"k8s:{namespace}/{kind.lower()}/{name}"


def parse_workload_id(wid: str) -> tuple[str, str, str] | None:
    """(namespace, kind in lower case, name) of a ``k8s:`` workload id, or None."""
    if not wid.startswith("k8s:"):
        return None
    parts = wid[4:].split("/")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


def _first(keys: Iterable[str], *maps: Mapping[str, str]) -> str:
    for key in keys:
        for m in maps:
            v = m.get(key, "").strip()
            if v:
                return v
    return ""


def build_workload(
    unit: Link,
    mode: Mode,
    chain: Sequence[Link],
    pods: Sequence[PodInfo],
    gpu_uuids: Sequence[str],
    *,
    source: str,
    protection: Protection,
    owner_keys: Sequence[str],
) -> Workload:
    """One workload for a unit and its GPU pods (all in one namespace)."""
    ns = pods[0].namespace
    unit_meta = meta(unit.obj) if unit.obj else {}
    labels = _str_map(unit_meta.get("labels")) if unit is not chain[0] else dict(pods[0].labels)
    annotations = (
        _str_map(unit_meta.get("annotations")) if unit is not chain[0] else dict(pods[0].annotations)
    )
    # Protection or exclusion on any pod counts for the whole unit (it is stopped as a whole).
    for p in pods:
        for src, dst in ((p.labels, labels), (p.annotations, annotations)):
            if src.get(PROTECT_KEY, "").strip().lower() == "true":
                dst[PROTECT_KEY] = src[PROTECT_KEY]
            if EXCLUDE_UNTIL_KEY in src and src[EXCLUDE_UNTIL_KEY] > dst.get(EXCLUDE_UNTIL_KEY, ""):
                dst[EXCLUDE_UNTIL_KEY] = src[EXCLUDE_UNTIL_KEY]
    why = protection.reason(ns)
    if why is None and mode is Mode.NEVER:
        why = f"{unit.kind} {unit.name} is never stopped (a DaemonSet or static pod)"
    floor, floor_why = protection.floor.of({**pods[0].labels, **pods[0].annotations, **labels, **annotations})
    if why is None and mode is Mode.SCALE:
        why = at_floor(unit.kind, unit.name, replicas_of(unit.obj), floor, floor_why)
    if why is not None:
        annotations[PROTECT_KEY] = "true"
        annotations[PROTECT_REASON_KEY] = why
    annotations[OWNER_CHAIN_KEY] = chain_text(chain)
    user = _first(owner_keys, annotations, labels, pods[0].annotations, pods[0].labels) or ns
    contact = annotations.get("gpusteward.io/contact") or (user if "@" in user else None)
    starts = [p.started_at for p in pods if p.started_at is not None]
    started = min(starts) if starts else datetime.fromtimestamp(0, tz=UTC)
    res = unit.known.resource if unit.known else None
    ref = {
        "namespace": ns,
        "kind": unit.kind,
        "name": unit.name,
        "uid": unit.uid,
        "api_version": unit.api_version,
        "group": res.group if res else "",
        "version": res.version if res else "",
        "plural": res.plural if res else "pods",
        "mode": mode.value,
        PODS_KEY: encode_pods((p.name, p.uid) for p in pods),
        FLOOR_REF: str(floor),
        "node": ",".join(sorted({p.node for p in pods})),
        "containers": ",".join(sorted({c for p in pods for c in p.containers})),
    }
    kind = WorkloadKind.JOB if unit.kind == "Job" else WorkloadKind.POD
    return Workload(
        id=workload_id(ns, unit.kind, unit.name),
        kind=kind,
        name=unit.name if unit is chain[0] else f"{unit.kind.lower()}/{unit.name}",
        owner=Owner(user=user, team=ns, contact=contact),
        gpus_requested=sum(p.gpus for p in pods),
        gpu_uuids=tuple(gpu_uuids),
        started_at=started,
        source=source,
        labels=MappingProxyType(labels),
        annotations=MappingProxyType(annotations),
        ref=MappingProxyType(ref),
    )
