"""An in-process fake of the Kubernetes API server, over real HTTP on loopback.

No kube-apiserver can run on these machines, so the tests run the official client against
this: a threaded ``http.server`` that stores real API objects (see ``cluster.py``), keeps a
global resourceVersion, and implements what gpusteward uses, the way the API server does:

- GET (get; list, in pages with ``limit`` and ``continue``; ``?watch=1`` chunked streams of
  ``{"type","object"}`` lines that end at ``timeoutSeconds``; a resourceVersion older than the
  kept history gets a 410 ``Expired`` ERROR event), POST (create, ``generateName``; Eviction),
  PUT (replace; a stale ``metadata.resourceVersion`` is 409 Conflict), PATCH (JSON merge patch; a
  ``metadata.resourceVersion`` in the patch is a precondition, 409 when stale), DELETE.
- The ``scale`` subresource (autoscaling/v1 Scale) of Deployments and StatefulSets.
- Evictions honour PodDisruptionBudgets (``status.disruptionsAllowed``): 429 when disallowed.
- Tiny stand-ins for the controllers: a Deployment/StatefulSet whose replicas go down loses
  pods (newest first), one whose replicas go up gets new pods cloned from its template pod;
  Kubeflow's notebook controller scales a Notebook's StatefulSet to 0 while
  ``kubeflow-resource-stopped`` is set.
- Fault injection: ``fail(method, path regex, status, times)`` answers a Status error instead.
- Paged lists: every page of one list comes from the snapshot taken at its first page and
  carries that snapshot's resourceVersion; ``metadata.continue`` is an opaque token and
  ``metadata.remainingItemCount`` counts what is left. ``expire_continue_tokens()`` (or
  ``compact()``) makes the tokens handed out so far answer 410 ``Expired``; ``after_page``
  is called with each page served, so a test can write between pages.

Every request is logged as (method, path, query, verb, group, resource, subresource, agent)
so tests can check the RBAC manifest against what was really called.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

Obj = dict[str, Any]
Key = tuple[str, str, str, str]  # (group, plural, namespace, name)

_PATH = re.compile(
    r"^/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)

KINDS = {
    ("", "pods"): "Pod",
    ("", "nodes"): "Node",
    ("", "namespaces"): "Namespace",
    ("apps", "deployments"): "Deployment",
    ("apps", "statefulsets"): "StatefulSet",
    ("apps", "replicasets"): "ReplicaSet",
    ("batch", "jobs"): "Job",
    ("policy", "poddisruptionbudgets"): "PodDisruptionBudget",
    ("events.k8s.io", "events"): "Event",
    ("coordination.k8s.io", "leases"): "Lease",
    ("kubeflow.org", "notebooks"): "Notebook",
}
CONFLICT = (
    'Operation cannot be fulfilled on {plural} "{name}": the object has been modified; '
    "please apply your changes to the latest version and try again"
)
CLUSTER_SCOPED = {("", "nodes"), ("", "namespaces")}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def status_body(code: int, reason: str, message: str, **extra: Any) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
        **extra,
    }


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int
    times: int


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: str
    verb: str
    group: str
    resource: str
    subresource: str
    agent: str


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.body = status_body(code, reason, message, **extra)
        self.code = code


class FakeCluster:
    """The stored objects, the resourceVersion clock, watch history and the fake controllers."""

    def __init__(self) -> None:
        self.objects: dict[Key, Obj] = {}
        self.rv = 100
        self.history: list[tuple[int, str, str, str, Obj]] = []  # (rv, group, plural, type, obj)
        self.compacted_below = 0
        self.epoch = 0
        self.cond = threading.Condition()
        self.templates: dict[tuple[str, str, str], Obj] = {}  # (group/plural, ns, owner) → pod
        self.faults: list[Fault] = []
        self.calls: list[Call] = []
        #: Snapshots of paged lists in progress: id → (resourceVersion, items).
        self.snapshots: dict[str, tuple[int, list[Obj]]] = {}
        self.after_page: Callable[[Obj], None] | None = None

    # -- storage ------------------------------------------------------------------------

    def _bump(self, obj: Obj) -> int:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return self.rv

    def _record(self, group: str, plural: str, kind: str, obj: Obj) -> None:
        self.history.append((self.rv, group, plural, kind, copy.deepcopy(obj)))
        self.cond.notify_all()

    def put(self, group: str, plural: str, obj: Obj, *, event: str = "ADDED") -> Obj:
        """Store ``obj`` (seeding and controller writes), with a uid and a new resourceVersion."""
        with self.cond:
            m = obj.setdefault("metadata", {})
            m.setdefault("uid", str(uuid.uuid4()))
            m.setdefault("creationTimestamp", "2026-01-05T08:00:00Z")
            ns = "" if (group, plural) in CLUSTER_SCOPED else m.get("namespace", "default")
            key = (group, plural, ns, m["name"])
            if key in self.objects:
                event = "MODIFIED"
            self._bump(obj)
            self.objects[key] = obj
            self._record(group, plural, event, obj)
            return obj

    def remove(self, group: str, plural: str, ns: str, name: str) -> Obj | None:
        with self.cond:
            obj = self.objects.pop((group, plural, ns, name), None)
            if obj is not None:
                self._bump(obj)
                self._record(group, plural, "DELETED", obj)
            return obj

    def get(self, group: str, plural: str, ns: str, name: str) -> Obj | None:
        with self.cond:
            obj = self.objects.get((group, plural, ns, name))
            return copy.deepcopy(obj) if obj is not None else None

    def items(self, group: str, plural: str, ns: str | None = None) -> list[Obj]:
        with self.cond:
            return [
                copy.deepcopy(o)
                for (g, p, n, _), o in sorted(self.objects.items())
                if g == group and p == plural and (ns is None or n == ns)
            ]

    def compact(self) -> None:
        """Forget the watch history as etcd compaction does, and end the open watches: a client
        resuming from any resourceVersion seen so far gets 410 Gone and must list again."""
        with self.cond:
            self.compacted_below = self.rv + 2
            self.history.clear()
            self.snapshots.clear()
            self.epoch += 1
            self.cond.notify_all()

    def last_rv(self, group: str, plural: str) -> int:
        with self.cond:
            rvs = [rv for rv, g, p, _, _ in self.history if g == group and p == plural]
            return max(rvs) if rvs else 0

    # -- paged lists --------------------------------------------------------------------

    def list_page(self, group: str, plural: str, ns: str | None, limit: int, token: str) -> Obj:
        """One page of a list: the first from the current objects, the next ones from the
        snapshot the first was cut from (as the API server reads etcd at that revision)."""
        with self.cond:
            if token:
                try:
                    cont = json.loads(base64.urlsafe_b64decode(token.encode()))
                    snap_id, start = str(cont["id"]), int(cont["start"])
                except (ValueError, KeyError, TypeError) as e:
                    raise ApiError(400, "BadRequest", f"continue key is not valid: {e}") from e
                if snap_id not in self.snapshots:
                    raise ApiError(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent list "
                        "result. You can start a new list without the continue parameter.",
                    )
                rv, items = self.snapshots[snap_id]
            else:
                snap_id, start, rv, items = uuid.uuid4().hex, 0, self.rv, self.items(group, plural, ns)
            end = start + limit if limit > 0 else len(items)
            meta: Obj = {"resourceVersion": str(rv)}
            if end < len(items):
                self.snapshots[snap_id] = (rv, items)
                meta["continue"] = base64.urlsafe_b64encode(
                    json.dumps({"id": snap_id, "start": end}).encode()
                ).decode()
                meta["remainingItemCount"] = len(items) - end
            else:
                self.snapshots.pop(snap_id, None)
            kind = KINDS.get((group, plural), "Object")
            page = {
                "apiVersion": f"{group}/v1" if group else "v1",
                "kind": f"{kind}List",
                "metadata": meta,
                "items": copy.deepcopy(items[start:end]),
            }
        if self.after_page is not None:
            self.after_page(page)
        return page

    def expire_continue_tokens(self) -> None:
        """Every continue token handed out so far answers 410 Expired (its snapshot compacted)."""
        with self.cond:
            self.snapshots.clear()

    # -- faults -------------------------------------------------------------------------

    def fail(self, method: str, path: str, status: int, times: int = 1) -> None:
        with self.cond:
            self.faults.append(Fault(method.upper(), re.compile(path), status, times))

    def take_fault(self, method: str, path: str) -> int | None:
        with self.cond:
            for f in self.faults:
                if f.times > 0 and f.method == method and f.path.search(path):
                    f.times -= 1
                    return f.status
            return None

    # -- the controllers ----------------------------------------------------------------

    def owned_pods(self, ns: str, owner_uid: str) -> list[Obj]:
        out = []
        for pod in self.items("", "pods", ns):
            refs = pod["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == owner_uid for r in refs):
                out.append(pod)
                continue
            # Deployment → ReplicaSet → Pod
            for r in refs:
                rs = self.get("apps", "replicasets", ns, r.get("name", ""))
                if rs and any(o.get("uid") == owner_uid for o in rs["metadata"].get("ownerReferences") or []):
                    out.append(pod)
        return out

    def reconcile(self, group: str, plural: str, ns: str, name: str) -> None:
        """Make the pods of a Deployment/StatefulSet match its replicas; a Notebook's stop switch."""
        obj = self.get(group, plural, ns, name)
        if obj is None:
            return
        if (group, plural) == ("kubeflow.org", "notebooks"):
            stopped = "kubeflow-resource-stopped" in (obj["metadata"].get("annotations") or {})
            sts = self.get("apps", "statefulsets", ns, name)
            if sts is not None and sts["spec"].get("replicas") != (0 if stopped else 1):
                sts["spec"]["replicas"] = 0 if stopped else 1
                self.put("apps", "statefulsets", sts)
                self.reconcile("apps", "statefulsets", ns, name)
            return
        if (group, plural) not in (("apps", "deployments"), ("apps", "statefulsets")):
            return
        want = int(obj["spec"].get("replicas", 1))
        pods = sorted(self.owned_pods(ns, obj["metadata"]["uid"]), key=lambda p: p["metadata"]["name"])
        for pod in pods[want:][::-1]:
            self.remove("", "pods", ns, pod["metadata"]["name"])
        template = self.templates.get((f"{group}/{plural}", ns, name))
        for i in range(len(pods), want):
            if template is None:
                break
            pod = copy.deepcopy(template)
            base = template["metadata"]["name"].rsplit("-", 1)[0]
            pod["metadata"]["name"] = (
                f"{base}-{uuid.uuid4().hex[:5]}" if plural == "deployments" else f"{name}-{i}"
            )
            pod["metadata"].pop("uid", None)
            pod["status"]["startTime"] = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            self.put("", "pods", pod)
        obj = self.get(group, plural, ns, name)
        if obj is not None:
            n = len(self.owned_pods(ns, obj["metadata"]["uid"]))
            if obj.setdefault("status", {}).get("replicas") != n:
                obj["status"]["replicas"] = n
                self.put(group, plural, obj)


class FakeApiServer:
    """``FakeCluster`` served over HTTP on 127.0.0.1 (a free port)."""

    def __init__(self, cluster: FakeCluster | None = None) -> None:
        self.cluster = cluster or FakeCluster()
        handler = type("Handler", (_Handler,), {"cluster": self.cluster})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.stopping = False

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeApiServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.cluster.cond:
            self.cluster.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    cluster: FakeCluster
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    # -- plumbing -----------------------------------------------------------------------

    def _send(self, code: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else None

    def _route(self, method: str) -> None:
        url = urlparse(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        m = _PATH.match(url.path)
        body = self._read() if method in ("POST", "PUT", "PATCH", "DELETE") else None
        if m is None:
            self._send(404, status_body(404, "NotFound", f"no route {url.path}"))
            return
        group = m.group("g") or ""
        ns, plural, name, sub = m.group("ns") or "", m.group("plural"), m.group("name"), m.group("sub") or ""
        # The API server parses booleans with Go's strconv.ParseBool: the Python client below 37
        # sends "True", later ones "true".
        watch = q.get("watch") in ("1", "t", "T", "true", "True", "TRUE")
        verb = {
            "GET": "watch" if watch else ("get" if name else "list"),
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete",
        }[method]
        self.cluster.calls.append(
            Call(method, url.path, url.query, verb, group, plural, sub, self.headers.get("User-Agent", ""))
        )
        fault = self.cluster.take_fault(method, url.path)
        if fault is not None:
            reason = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError"}.get(fault, "Error")
            self._send(fault, status_body(fault, reason, f"injected {fault}"))
            return
        try:
            if watch:
                self._watch(group, plural, ns or None, q)
                return
            code, out = self._handle(method, group, plural, ns, name, sub, q, body)
        except ApiError as e:
            code, out = e.code, e.body
        self._send(code, out)

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    # -- verbs --------------------------------------------------------------------------

    def _obj(self, group: str, plural: str, ns: str, name: str) -> Obj:
        obj = self.cluster.get(group, plural, ns, name)
        if obj is None:
            kind = KINDS.get((group, plural), plural)
            raise ApiError(
                404,
                "NotFound",
                f'{plural}{"." + group if group else ""} "{name}" not found',
                details={"kind": kind},
            )
        return obj

    def _handle(
        self,
        method: str,
        group: str,
        plural: str,
        ns: str,
        name: str | None,
        sub: str,
        q: dict[str, str],
        body: Any,
    ) -> tuple[int, Obj]:
        c = self.cluster
        if method == "GET" and name is None:
            try:
                limit = int(q.get("limit") or 0)
            except ValueError as e:
                raise ApiError(400, "BadRequest", f"limit: {e}") from e
            return 200, c.list_page(group, plural, ns or None, limit, q.get("continue", ""))
        assert name is not None or method == "POST"
        if sub == "scale":
            return self._scale(method, group, plural, ns, name or "", body)
        if sub == "eviction" and method == "POST":
            return self._evict(ns, name or "", body)
        if method == "GET":
            return 200, self._obj(group, plural, ns, name or "")
        if method == "POST":
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "body must be an object")
            m = body.setdefault("metadata", {})
            if not m.get("name"):
                if not m.get("generateName"):
                    raise ApiError(422, "Invalid", "name or generateName is required")
                m["name"] = m["generateName"] + uuid.uuid4().hex[:5]
            if group == "events.k8s.io":
                for f in ("eventTime", "reportingController", "reportingInstance", "action", "reason"):
                    if not body.get(f):
                        raise ApiError(422, "Invalid", f"Event.events.k8s.io is invalid: {f}: Required value")
            m["namespace"] = ns or m.get("namespace")
            if c.get(group, plural, ns, m["name"]) is not None:
                raise ApiError(409, "AlreadyExists", f'{plural} "{m["name"]}" already exists')
            m.pop("resourceVersion", None)
            return 201, copy.deepcopy(c.put(group, plural, body))
        if method == "PUT":
            with c.cond:
                cur = self._obj(group, plural, ns, name or "")
                want = (body.get("metadata") or {}).get("resourceVersion")
                if want and want != cur["metadata"]["resourceVersion"]:
                    raise ApiError(
                        409,
                        "Conflict",
                        CONFLICT.format(plural=plural, name=name),
                    )
                body["metadata"]["uid"] = cur["metadata"]["uid"]
                body["metadata"]["creationTimestamp"] = cur["metadata"].get("creationTimestamp")
                out = c.put(group, plural, body)
            c.reconcile(group, plural, ns, name or "")
            return 200, copy.deepcopy(out)
        if method == "PATCH":
            ctype = (self.headers.get("Content-Type") or "").split(";")[0]
            if ctype not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                raise ApiError(415, "UnsupportedMediaType", f"the fake serves merge patches, not {ctype}")
            with c.cond:
                cur = self._obj(group, plural, ns, name or "")
                want = ((body or {}).get("metadata") or {}).get("resourceVersion")
                if want and want != cur["metadata"]["resourceVersion"]:
                    raise ApiError(
                        409,
                        "Conflict",
                        CONFLICT.format(plural=plural, name=name),
                    )
                new = merge_patch(cur, body)
                new["metadata"]["uid"] = cur["metadata"]["uid"]
                out = c.put(group, plural, new)
            c.reconcile(group, plural, ns, name or "")
            return 200, self._obj(group, plural, ns, name or "") if out else out
        if method == "DELETE":
            cur = self._obj(group, plural, ns, name or "")
            pre = ((body or {}).get("preconditions") or {}).get("uid")
            if pre and pre != cur["metadata"]["uid"]:
                raise ApiError(409, "Conflict", "Precondition failed: UID in precondition does not match")
            c.remove(group, plural, ns, name or "")
            return 200, cur
        raise ApiError(405, "MethodNotAllowed", method)

    def _scale(self, method: str, group: str, plural: str, ns: str, name: str, body: Any) -> tuple[int, Obj]:
        c = self.cluster
        with c.cond:
            cur = self._obj(group, plural, ns, name)
            if method == "PATCH":
                want = ((body or {}).get("metadata") or {}).get("resourceVersion")
                if want and want != cur["metadata"]["resourceVersion"]:
                    raise ApiError(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on {plural} "{name}": the object has been modified',
                    )
                replicas = ((body or {}).get("spec") or {}).get("replicas")
                if replicas is not None:
                    cur["spec"]["replicas"] = int(replicas)
                    c.put(group, plural, cur)
            elif method != "GET":
                raise ApiError(405, "MethodNotAllowed", method)
        if method == "PATCH":
            c.reconcile(group, plural, ns, name)
            cur = self._obj(group, plural, ns, name)
        m = cur["metadata"]
        return 200, {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": m["uid"],
                "resourceVersion": m["resourceVersion"],
            },
            "spec": {"replicas": cur["spec"].get("replicas", 1)},
            "status": {"replicas": (cur.get("status") or {}).get("replicas", 0)},
        }

    def _evict(self, ns: str, name: str, body: Any) -> tuple[int, Obj]:
        c = self.cluster
        with c.cond:
            pod = self._obj("", "pods", ns, name)
            pre = (((body or {}).get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
            if pre and pre != pod["metadata"]["uid"]:
                raise ApiError(409, "Conflict", "Precondition failed: UID in precondition does not match")
            labels = pod["metadata"].get("labels") or {}
            for pdb in c.items("policy", "poddisruptionbudgets", ns):
                sel = (pdb["spec"].get("selector") or {}).get("matchLabels") or {}
                if not sel or any(labels.get(k) != v for k, v in sel.items()):
                    continue
                allowed = int((pdb.get("status") or {}).get("disruptionsAllowed", 0))
                if allowed <= 0:
                    raise ApiError(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        details={
                            "causes": [
                                {
                                    "reason": "DisruptionBudget",
                                    "message": f"The disruption budget {pdb['metadata']['name']} needs "
                                    f"{pdb['spec'].get('minAvailable', 1)} healthy pods",
                                }
                            ]
                        },
                    )
                pdb["status"]["disruptionsAllowed"] = allowed - 1
                c.put("policy", "poddisruptionbudgets", pdb)
            c.remove("", "pods", ns, name)
        return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    # -- watch --------------------------------------------------------------------------

    def _events(
        self, group: str, plural: str, ns: str | None, since: int, timeout_s: float
    ) -> Iterator[Obj | None]:
        c = self.cluster
        deadline = threading.Event()
        timer = threading.Timer(timeout_s, lambda: (deadline.set(), _notify(c)))
        timer.daemon = True
        timer.start()
        epoch = c.epoch
        try:
            last = since
            while not deadline.is_set():
                with c.cond:
                    if c.epoch != epoch and last + 1 >= c.compacted_below:
                        return  # compacted while watching: the stream ends, the client resumes
                    if c.epoch != epoch:
                        return
                    if last + 1 < c.compacted_below:
                        yield {
                            "type": "ERROR",
                            "object": status_body(
                                410, "Expired", f"too old resource version: {last} ({c.compacted_below})"
                            ),
                        }
                        return
                    batch = [
                        (rv, kind, obj)
                        for rv, g, p, kind, obj in c.history
                        if rv > last
                        and g == group
                        and p == plural
                        and (ns is None or obj["metadata"].get("namespace") == ns)
                    ]
                    if not batch:
                        c.cond.wait(timeout=0.5)
                for rv, kind, obj in batch:
                    last = max(last, rv)
                    yield {"type": kind, "object": obj}
                if not batch:
                    yield None  # a chance to notice a closed connection
        finally:
            timer.cancel()

    def _watch(self, group: str, plural: str, ns: str | None, q: dict[str, str]) -> None:
        since = int(q.get("resourceVersion") or 0)
        timeout_s = float(q.get("timeoutSeconds") or 30)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in self._events(group, plural, ns, since, timeout_s):
                if event is None:
                    continue
                line = (json.dumps(event) + "\n").encode()
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return
        self.close_connection = True


def _notify(c: FakeCluster) -> None:
    with c.cond:
        c.cond.notify_all()
