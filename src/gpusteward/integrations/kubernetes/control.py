"""What the Kubernetes executors need of the API, as Protocols.

``gpusteward.integrations.kubernetes.kubeapi.KubeApi`` implements them; the wiring passes it in, so
this package imports neither the sensing code nor the ``kubernetes`` client. Answers carry
their HTTP status: a 404, 409 or 429 is a fact to act on, not an exception. A call that got
no answer raises ``SourceError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

#: (group, version, plural, namespaced).
Res = tuple[str, str, str, bool]

PODS: Res = ("", "v1", "pods", True)
EVENTS: Res = ("events.k8s.io", "v1", "events", True)
LEASES: Res = ("coordination.k8s.io", "v1", "leases", True)
DEPLOYMENTS: Res = ("apps", "v1", "deployments", True)
STATEFULSETS: Res = ("apps", "v1", "statefulsets", True)

#: Written on a scaled-down owner (with its replicas, in the same write): what restore puts back.
ORIGINAL_REPLICAS_KEY = "gpusteward.io/original-replicas"
STOPPED_AT_KEY = "gpusteward.io/stopped-at"
STOPPED_REASON_KEY = "gpusteward.io/stopped-reason"
#: Kubeflow's notebook controller keeps a Notebook's StatefulSet at 0 while this is set.
KUBEFLOW_STOPPED_KEY = "kubeflow-resource-stopped"


class ApiReply(Protocol):
    @property
    def status(self) -> int: ...

    @property
    def body(self) -> dict[str, Any]: ...

    @property
    def ok(self) -> bool: ...

    @property
    def message(self) -> str: ...


class KubeControl(Protocol):
    def get(self, res: Res, namespace: str, name: str) -> ApiReply: ...

    def patch(self, res: Res, namespace: str, name: str, body: Mapping[str, Any]) -> ApiReply: ...

    def create(self, res: Res, namespace: str, body: Mapping[str, Any]) -> ApiReply: ...

    def replace(self, res: Res, namespace: str, name: str, body: Mapping[str, Any]) -> ApiReply: ...

    def get_scale(self, res: Res, namespace: str, name: str) -> ApiReply: ...

    def patch_scale(self, res: Res, namespace: str, name: str, body: Mapping[str, Any]) -> ApiReply: ...

    def evict(self, namespace: str, name: str, uid: str, grace_s: int | None) -> ApiReply: ...

    def delete_pod(self, namespace: str, name: str, uid: str, grace_s: int) -> ApiReply: ...


def micro_time(at: datetime) -> str:
    """Kubernetes ``MicroTime``: RFC 3339 with microseconds, in UTC."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    a = metadata(obj).get("annotations")
    return {str(k): str(v) for k, v in a.items()} if isinstance(a, Mapping) else {}
