"""The one choke point to the Kubernetes API: the official client, raw JSON in and out.

Every call goes through the official ``kubernetes`` client's typed methods with
``_preload_content=False``, so objects stay plain dicts (the same for Deployments and for
Kubeflow Notebooks read as unstructured objects) across client versions. Objects in an API
group go through ``CustomObjectsApi``, whose paths are the generic
``/apis/<group>/<version>/namespaces/<ns>/<plural>/<name>``; core objects (pods)
through ``CoreV1Api``.

Answers are ``Reply(status, body)``: the callers (the executor, the lease) decide what a 404,
409 or 429 means. Only a transport failure (no answer at all) raises ``SourceError``.
The ``kubernetes`` package is imported here only, and only when an ``ApiClient`` is built.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from gpusteward.domain.errors import SourceError

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
#: Fresh starts of a paged list whose continue token expired before the answer is an error.
LIST_RESTARTS = 3
JsonObj = dict[str, Any]
#: (group, version, plural, namespaced): what the executor passes without importing this module.
ResourceLike = tuple[str, str, str, bool]


@dataclass(frozen=True, slots=True)
class Reply:
    """An API answer: the HTTP status and the JSON body (a ``Status`` object on errors)."""

    status: int
    body: JsonObj

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        msg = self.body.get("message") if isinstance(self.body, dict) else None
        return str(msg or self.body)[:300]


class Resource(NamedTuple):
    """Where a kind lives: ``group`` is "" for the core group. A plain tuple works as well."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


PODS = Resource("", "v1", "pods")
EVENTS = Resource("events.k8s.io", "v1", "events")
LEASES = Resource("coordination.k8s.io", "v1", "leases")


def _body(raw: Any) -> JsonObj:
    if raw is None:
        return {}
    if isinstance(raw, bytes | bytearray):
        raw = raw.decode("utf-8", "replace")
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except ValueError:
            return {"message": raw[:300]}
        return data if isinstance(data, dict) else {"items": data}
    return raw if isinstance(raw, dict) else {}


class KubeApi:
    """Thin, typed-by-status access to the API server through one ``ApiClient``."""

    def __init__(self, api_client: Any, *, timeout_s: float = 10.0, page_size: int = 500) -> None:
        from kubernetes import client as k8s  # lazy: the core runs without the k8s extra

        self.api_client = api_client
        self.core = k8s.CoreV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        self.models = k8s
        self.timeout_s = timeout_s
        #: Objects per list request (``limit``); 0 lists everything in one request.
        self.page_size = page_size

    # -- plumbing ---------------------------------------------------------------------

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Reply:
        from kubernetes.client.exceptions import ApiException

        kw.setdefault("_preload_content", False)
        kw.setdefault("_request_timeout", self.timeout_s)
        try:
            resp = fn(*args, **kw)
        except ApiException as e:
            if not e.status:
                raise SourceError(f"kubernetes {what}: {e.reason}") from e
            return Reply(int(e.status), _body(e.body) or {"message": str(e.reason)})
        except (OSError, ValueError) as e:
            # urllib3 errors derive from OSError/ValueError-ish bases; no answer at all.
            raise SourceError(f"kubernetes {what}: {type(e).__name__}: {e}") from e
        except Exception as e:
            if type(e).__module__.startswith("urllib3"):
                raise SourceError(f"kubernetes {what}: {type(e).__name__}: {e}") from e
            raise
        return Reply(int(getattr(resp, "status", 200) or 200), _body(getattr(resp, "data", None)))

    # -- generic objects ----------------------------------------------------------------

    def get(self, res: ResourceLike, namespace: str, name: str) -> Reply:
        r = Resource(*res)
        if r == PODS:
            return self._call(f"get pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace)
        return self._call(
            f"get {r.plural} {namespace}/{name}",
            self.custom.get_namespaced_custom_object,
            r.group,
            r.version,
            namespace,
            r.plural,
            name,
        )

    def patch(self, res: ResourceLike, namespace: str, name: str, body: Mapping[str, Any]) -> Reply:
        """A JSON merge patch (RFC 7386). ``metadata.resourceVersion`` in it is a precondition (409)."""
        r = Resource(*res)
        if r == PODS:  # only a pod's annotations (a spot interruption's checkpoint request)
            if set(body) != {"metadata"} or set(body["metadata"]) - {"annotations", "resourceVersion"}:
                raise ValueError("gpusteward patches nothing of a pod but its annotations")
            what = f"annotate pod {namespace}/{name}"
            return self._call(what, self.core.patch_namespaced_pod, name, namespace, dict(body))
        return self._call(
            f"patch {r.plural} {namespace}/{name}",
            self.custom.patch_namespaced_custom_object,
            r.group,
            r.version,
            namespace,
            r.plural,
            name,
            dict(body),
            _content_type=MERGE_PATCH,
        )

    def create(self, res: ResourceLike, namespace: str, body: Mapping[str, Any]) -> Reply:
        r = Resource(*res)
        return self._call(
            f"create {r.plural} in {namespace}",
            self.custom.create_namespaced_custom_object,
            r.group,
            r.version,
            namespace,
            r.plural,
            dict(body),
        )

    def replace(self, res: ResourceLike, namespace: str, name: str, body: Mapping[str, Any]) -> Reply:
        """PUT the whole object; its ``metadata.resourceVersion`` makes a stale write a 409."""
        r = Resource(*res)
        return self._call(
            f"replace {r.plural} {namespace}/{name}",
            self.custom.replace_namespaced_custom_object,
            r.group,
            r.version,
            namespace,
            r.plural,
            name,
            dict(body),
        )

    def get_scale(self, res: ResourceLike, namespace: str, name: str) -> Reply:
        """The ``scale`` subresource (autoscaling/v1 Scale) of a Deployment, StatefulSet, ..."""
        r = Resource(*res)
        return self._call(
            f"get {r.plural}/scale {namespace}/{name}",
            self.custom.get_namespaced_custom_object_scale,
            r.group,
            r.version,
            namespace,
            r.plural,
            name,
        )

    def patch_scale(self, res: ResourceLike, namespace: str, name: str, body: Mapping[str, Any]) -> Reply:
        r = Resource(*res)
        return self._call(
            f"patch {r.plural}/scale {namespace}/{name}",
            self.custom.patch_namespaced_custom_object_scale,
            r.group,
            r.version,
            namespace,
            r.plural,
            name,
            dict(body),
            _content_type=MERGE_PATCH,
        )

    # -- pods ---------------------------------------------------------------------------

    def evict(self, namespace: str, name: str, uid: str, grace_s: int | None) -> Reply:
        """POST an Eviction (policy/v1): the API server honours PodDisruptionBudgets (429)."""
        m = self.models
        body = m.V1Eviction(
            metadata=m.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=m.V1DeleteOptions(
                grace_period_seconds=grace_s, preconditions=m.V1Preconditions(uid=uid)
            ),
        )
        return self._call(
            f"evict pod {namespace}/{name}", self.core.create_namespaced_pod_eviction, name, namespace, body
        )

    def delete_pod(self, namespace: str, name: str, uid: str, grace_s: int) -> Reply:
        m = self.models
        body = m.V1DeleteOptions(grace_period_seconds=grace_s, preconditions=m.V1Preconditions(uid=uid))
        return self._call(
            f"delete pod {namespace}/{name}",
            self.core.delete_namespaced_pod,
            name,
            namespace,
            grace_period_seconds=grace_s,
            body=body,
        )

    # -- nodes (L4 parking: cordon / uncordon) -----------------------------------------------

    def get_node(self, name: str) -> Reply:
        return self._call(f"get node {name}", self.core.read_node, name)

    def list_nodes(self) -> Reply:
        return self._list_pages("list nodes", self.core.list_node)

    def patch_node(self, name: str, body: Mapping[str, Any]) -> Reply:
        """A JSON merge patch of a Node; ``metadata.resourceVersion`` in it is a precondition (409)."""
        return self._call(
            f"patch node {name}", self.core.patch_node, name, dict(body), _content_type=MERGE_PATCH
        )

    # -- list and watch -----------------------------------------------------------------

    def list_fn(self, res: ResourceLike) -> Any:
        """The client's list function for ``res`` across namespaces (what ``Watch`` streams)."""
        r = Resource(*res)
        if r == PODS:
            return self.core.list_pod_for_all_namespaces
        raise ValueError(f"no list function for {r.plural}")

    def list(self, res: ResourceLike) -> Reply:
        return self._list_pages(f"list {res[2]}", self.list_fn(res))

    def _list_pages(self, what: str, fn: Any) -> Reply:
        """The whole list, fetched ``page_size`` objects at a time (``limit`` + ``continue``).

        The pages of one list are one consistent snapshot: every page carries the snapshot's
        resourceVersion, which is where a watch resumes (the last page's is returned). When a
        continue token expires (410 Gone, the snapshot compacted away), the list starts over:
        mixing two snapshots could keep a deleted pod or miss a new one.
        """
        reply = Reply(500, {"message": "not listed"})
        for _ in range(1 + LIST_RESTARTS):
            items: list[Any] = []
            token = ""
            while True:
                kw: dict[str, Any] = {"limit": self.page_size} if self.page_size > 0 else {}
                if token:
                    kw["_continue"] = token
                reply = self._call(what, fn, **kw)
                if not reply.ok:
                    break
                items.extend(reply.body.get("items") or [])
                token = str((reply.body.get("metadata") or {}).get("continue") or "")
                if not token:
                    return Reply(reply.status, {**reply.body, "items": items})
            if not (reply.status == 410 and token):
                return reply
            log.info("kubernetes %s: continue token expired (%s); listing again", what, reply.message)
        return reply

    def watch(self, res: ResourceLike, resource_version: str, timeout_s: int) -> Iterator[JsonObj]:
        """Watch events (``{"type", "object"}`` with raw objects) from ``resource_version``.

        Ends when the server closes the stream (after ``timeout_s``). A 410 Gone, or any
        error the server sends, raises ``WatchExpired`` / ``SourceError``; the caller re-lists.
        """
        from kubernetes import watch as kwatch
        from kubernetes.client.exceptions import ApiException

        watch_cls: Any = kwatch.Watch  # the client's watch is untyped
        w = watch_cls()
        try:
            for event in w.stream(
                self.list_fn(res),
                resource_version=resource_version,
                timeout_seconds=timeout_s,
                allow_watch_bookmarks=True,
                _request_timeout=(self.timeout_s, timeout_s + self.timeout_s),
            ):
                yield {"type": event.get("type"), "object": event.get("raw_object")}
        except ApiException as e:
            if e.status == 410:
                raise WatchExpired(f"watch of {res[2]} from {resource_version}: {e.reason}") from e
            raise SourceError(f"kubernetes watch {res[2]}: {e.status} {e.reason}") from e
        except Exception as e:
            if isinstance(e, OSError | ValueError) or type(e).__module__.startswith("urllib3"):
                raise SourceError(f"kubernetes watch {res[2]}: {type(e).__name__}: {e}") from e
            raise
        finally:
            w.stop()


class WatchExpired(SourceError):
    """The watch's resourceVersion is too old (410 Gone): list again."""
