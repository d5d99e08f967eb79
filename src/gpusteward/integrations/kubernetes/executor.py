"""Acting on Kubernetes workloads through the API (never kubectl, never a shell).

L2 (graceful stop), by how the workload's unit stops (``ref["mode"]``, set by the source):

- ``scale`` (Deployment, StatefulSet, LeaderWorkerSet): one JSON merge patch sets
  ``spec.replicas`` to the unit's floor (``scale_floor.py``: zero only where it wakes on demand,
  else its minimum; the pods above it go) and writes the original count into the
  ``gpusteward.io/original-replicas`` annotation in the same write, so there is never a
  scaled-down object without its way back. The patch carries the resourceVersion just
  read: a 409 Conflict re-reads the object and tries again (bounded).
- ``notebook`` (Kubeflow Notebook): Kubeflow's own stop switch, the
  ``kubeflow-resource-stopped`` annotation (its notebook controller then scales the
  Notebook's StatefulSet to 0 and keeps the Notebook and its volume).
- ``evict`` (bare pods, Jobs): the Eviction API with the termination grace, so
  PodDisruptionBudgets are honoured (a 429 means the budget forbids it now: the action
  fails and the runner retries it after its backoff).

L3 (force): delete the pods with grace period 0, only in ``force_delete_namespaces``.
Every step is idempotent (a second call finds the effect and does nothing) and verified by
reading the pods back. Each action posts an Event on the workload's pods.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from gpusteward.domain.errors import ExecutionError, PreflightFailed, SourceError
from gpusteward.domain.models import PROTECT_KEY, Decision, Level, Outcome, Workload
from gpusteward.domain.ports import Clock, SystemClock
from gpusteward.integrations.kubernetes.control import (
    KUBEFLOW_STOPPED_KEY,
    ORIGINAL_REPLICAS_KEY,
    PODS,
    STOPPED_AT_KEY,
    STOPPED_REASON_KEY,
    ApiReply,
    KubeControl,
    Res,
    annotations_of,
    metadata,
    rfc3339,
)
from gpusteward.integrations.kubernetes.events import EventPoster
from gpusteward.integrations.kubernetes.interruption import request_checkpoint
from gpusteward.integrations.kubernetes.podref import pods_of
from gpusteward.integrations.kubernetes.scale_floor import FLOOR_REF

log = logging.getLogger(__name__)


def resource_of(workload: Workload) -> Res:
    ref = workload.ref
    return (ref.get("group", ""), ref.get("version", ""), ref.get("plural", ""), True)


class KubernetesExecutor:
    """Implements ``Executor`` for workloads of the ``kubernetes`` source."""

    def __init__(
        self,
        api: KubeControl,
        fresh: Callable[[Workload], Workload | None],
        *,
        source: str = "kubernetes",
        scale_to: int = 0,
        eviction_grace_s: int | None = 120,
        force_delete_namespaces: Collection[str] = (),
        conflict_retries: int = 3,
        refuse: Callable[[str], str | None] = lambda ns: None,
        events: EventPoster | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = source
        self.api = api
        self.fresh = fresh
        self.scale_to = scale_to
        self.grace_s = eviction_grace_s
        self.force_ns = frozenset(force_delete_namespaces)
        self.conflict_retries = conflict_retries
        self.refuse = refuse
        self.events = events
        self.clock = clock or SystemClock()
        #: 409s met and retried (tests, metrics).
        self.conflicts = 0

    # -- the Executor protocol ---------------------------------------------------------

    def _force_allowed(self, namespace: str) -> bool:
        return "*" in self.force_ns or namespace in self.force_ns

    def supports(self, workload: Workload, level: Level) -> bool:
        if workload.source != self.name or not workload.ref.get("mode"):
            return False
        mode = workload.ref["mode"]
        if level is Level.GRACEFUL_STOP:
            return mode in ("scale", "notebook", "evict")
        if level is Level.FORCE:
            return mode in ("scale", "notebook", "evict") and self._force_allowed(workload.ref["namespace"])
        return False

    def current(self, workload: Workload) -> Workload | None:
        try:
            return self.fresh(workload)
        except SourceError as e:
            raise ExecutionError(f"cannot re-read {workload.id} now, nothing done: {e}") from e

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        ns = workload.ref.get("namespace", "")
        why = self.refuse(ns)
        if why is not None:
            raise PreflightFailed(why)
        if (workload.tag(PROTECT_KEY) or "").strip().lower() == "true":
            raise PreflightFailed(f"{workload.id} carries {PROTECT_KEY}=true")
        if decision.level is Level.FORCE:
            if not self._force_allowed(ns):
                raise ExecutionError(f"force delete is not configured for namespace {ns}")
            self._event(workload, "ForceStop", decision, "Warning")
            return self._delete(workload)
        if decision.level is not Level.GRACEFUL_STOP:
            raise ExecutionError(f"{decision.level.label} is not something the Kubernetes executor does")
        mode = workload.ref.get("mode")
        self._event(workload, "Stop", decision, "Warning")
        if mode == "scale":
            return self._scale(workload, decision)
        if mode == "notebook":
            return self._stop_notebook(workload, decision)
        if mode == "evict":
            return self._evict(workload)
        raise ExecutionError(f"{workload.id}: {mode} workloads get notices only")

    def checkpoint_now(self, decision: Decision, workload: Workload) -> Outcome:
        """A spot interruption: the pods' checkpoint annotation (kubernetes/interruption.py)."""
        self._event(workload, "CheckpointRequested", decision, "Warning")
        return request_checkpoint(self.api, workload, decision.at, self._call, self.conflict_retries)

    def requeue_now(self, decision: Decision, workload: Workload) -> Outcome:
        """Near the interruption's deadline: evict the pods (PDBs honoured); their controller
        starts them again on another node (the node is cordoned first)."""
        if workload.ref.get("mode") == "notebook":
            raise PreflightFailed(f"{workload.id} is a notebook: its owner restarts it")
        self._event(workload, "Evict", decision, "Warning")
        return self._evict(workload)

    def verify(self, decision: Decision, workload: Workload) -> bool:
        """Every pod of the workload is gone (or replaced by another incarnation); a unit scaled to
        its floor keeps at most that many."""
        keep = (
            self._floor(workload)
            if workload.ref.get("mode") == "scale" and decision.level is Level.GRACEFUL_STOP
            else 0
        )
        try:
            return len(self._remaining(workload)) <= keep
        except ExecutionError as e:
            log.warning("verify %s: %s", decision.idempotency_key, e)
            return False

    # -- helpers -----------------------------------------------------------------------

    def _event(self, workload: Workload, action: str, decision: Decision, kind: str) -> None:
        if self.events is not None:
            self.events.post(workload, action, decision.rule or "gpu-waste", decision.reason, kind)

    def _call(self, what: str, fn: Callable[..., ApiReply], *args: Any) -> ApiReply:
        try:
            return fn(*args)
        except SourceError as e:
            raise ExecutionError(f"{what}: {e}") from e

    def _remaining(self, workload: Workload) -> list[str]:
        """Pods of this incarnation still there (terminating ones included)."""
        ns = workload.ref.get("namespace", "")
        left = []
        for name, uid in pods_of(workload.ref):
            reply = self._call(f"get pod {ns}/{name}", self.api.get, PODS, ns, name)
            if reply.status == 404:
                continue
            if not reply.ok:
                raise ExecutionError(f"get pod {ns}/{name}: HTTP {reply.status}: {reply.message}")
            if str(metadata(reply.body).get("uid", "")) == uid:
                left.append(name)
        return left

    def _floor(self, workload: Workload) -> int:
        raw = workload.ref.get(FLOOR_REF, "")
        return int(raw) if raw.isdigit() else self.scale_to

    def _outcome(self, workload: Workload, detail: str, keep: int = 0) -> Outcome:
        """Verified once at most ``keep`` pods of this incarnation are left; the GPUs released are
        those the workload no longer holds when read again (all of them when none is kept)."""
        left = self._remaining(workload)
        if len(left) > keep:
            extra = len(left) - keep
            return Outcome(
                True, f"{detail}; {extra} pod(s) still to terminate: {', '.join(left)}", verified=False
            )
        released = workload.gpu_uuids
        if left:
            now = self.current(workload)
            kept = set(now.gpu_uuids) if now is not None else set()
            released = tuple(u for u in workload.gpu_uuids if u not in kept)
            detail += f"; kept {', '.join(left)}"
        return Outcome(True, detail, verified=True, released_gpu_uuids=released)

    def _write(
        self, workload: Workload, build: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> tuple[str, dict[str, Any] | None]:
        """Read the unit, let ``build`` make a patch from it (None: nothing to do), write it with
        the resourceVersion read as a precondition; a 409 reads again (bounded)."""
        res, ns, name = resource_of(workload), workload.ref["namespace"], workload.ref["name"]
        what = f"{workload.ref.get('kind', '')} {ns}/{name}"
        for _ in range(self.conflict_retries + 1):
            got = self._call(f"get {what}", self.api.get, res, ns, name)
            if got.status == 404:
                return "gone", None
            if not got.ok:
                raise ExecutionError(f"get {what}: HTTP {got.status}: {got.message}")
            obj = got.body
            if workload.ref.get("uid") and metadata(obj).get("uid") != workload.ref["uid"]:
                raise PreflightFailed(f"{what} was deleted and created again since it was judged")
            patch = build(obj)
            if patch is None:
                return "unchanged", obj
            meta: dict[str, Any] = dict(patch.get("metadata") or {})
            meta["resourceVersion"] = metadata(obj).get("resourceVersion")
            patch["metadata"] = meta
            put = self._call(f"patch {what}", self.api.patch, res, ns, name, patch)
            if put.status == 409:
                self.conflicts += 1
                log.info("409 conflict writing %s; reading it again", what)
                continue
            if put.status == 404:
                return "gone", None
            if not put.ok:
                raise ExecutionError(f"patch {what}: HTTP {put.status}: {put.message}")
            return "written", put.body
        raise ExecutionError(f"patch {what}: still 409 Conflict after {self.conflict_retries} retries")

    # -- L2 ----------------------------------------------------------------------------

    def _scale(self, workload: Workload, decision: Decision) -> Outcome:
        target = self._floor(workload)
        now = self.clock.now()

        def build(obj: dict[str, Any]) -> dict[str, Any] | None:
            spec = obj.get("spec") or {}
            replicas = int(spec.get("replicas", 1) if isinstance(spec, dict) else 1)
            ann = annotations_of(obj)
            if replicas <= target:
                return None  # already there (a repeated call, or scaled by someone else)
            original = ann.get(ORIGINAL_REPLICAS_KEY) or str(replicas)
            return {
                "metadata": {
                    "annotations": {
                        ORIGINAL_REPLICAS_KEY: original,
                        STOPPED_AT_KEY: rfc3339(now),
                        STOPPED_REASON_KEY: (decision.rule or "gpu-waste")[:200],
                    }
                },
                "spec": {"replicas": target},
            }

        result, _ = self._write(workload, build)
        what = f"{workload.ref.get('kind')} {workload.ref['namespace']}/{workload.ref['name']}"
        if result == "gone":
            return Outcome(True, f"{what} is gone", verified=True, released_gpu_uuids=workload.gpu_uuids)
        if result == "unchanged":
            return self._outcome(workload, f"{what} already at {target} replicas or fewer", target)
        return self._outcome(
            workload, f"scaled {what} to {target} (original count in {ORIGINAL_REPLICAS_KEY})", target
        )

    def _stop_notebook(self, workload: Workload, decision: Decision) -> Outcome:
        now = self.clock.now()

        def build(obj: dict[str, Any]) -> dict[str, Any] | None:
            if KUBEFLOW_STOPPED_KEY in annotations_of(obj):
                return None
            return {
                "metadata": {
                    "annotations": {
                        KUBEFLOW_STOPPED_KEY: rfc3339(now),
                        ORIGINAL_REPLICAS_KEY: "1",
                        STOPPED_AT_KEY: rfc3339(now),
                        STOPPED_REASON_KEY: (decision.rule or "gpu-waste")[:200],
                    }
                }
            }

        result, _ = self._write(workload, build)
        what = f"Notebook {workload.ref['namespace']}/{workload.ref['name']}"
        if result == "gone":
            return Outcome(True, f"{what} is gone", verified=True, released_gpu_uuids=workload.gpu_uuids)
        if result == "unchanged":
            return self._outcome(workload, f"{what} was already stopped ({KUBEFLOW_STOPPED_KEY})")
        return self._outcome(workload, f"stopped {what} ({KUBEFLOW_STOPPED_KEY}; volume and spec kept)")

    def _evict(self, workload: Workload) -> Outcome:
        ns = workload.ref["namespace"]
        evicted, refused = [], []
        for name, uid in pods_of(workload.ref):
            reply = self._call(f"evict pod {ns}/{name}", self.api.evict, ns, name, uid, self.grace_s)
            if reply.ok:
                evicted.append(name)
            elif reply.status in (404, 409):
                continue  # gone, or another pod by that name (uid precondition): not ours to touch
            elif reply.status == 429:
                refused.append(f"{name} ({reply.message})")
            else:
                raise ExecutionError(f"evict pod {ns}/{name}: HTTP {reply.status}: {reply.message}")
        if refused:
            raise ExecutionError(
                f"eviction refused by a PodDisruptionBudget for {', '.join(refused)}"
                + (f"; evicted {', '.join(evicted)}" if evicted else "")
                + "; retried after the backoff"
            )
        grace = "the pod's own" if self.grace_s is None else f"{self.grace_s} s"
        return self._outcome(
            workload, f"evicted {', '.join(evicted) or 'no pod (already gone)'} in {ns} (grace {grace})"
        )

    # -- L3 ----------------------------------------------------------------------------

    def _delete(self, workload: Workload) -> Outcome:
        ns = workload.ref["namespace"]
        deleted = []
        for name, uid in pods_of(workload.ref):
            reply = self._call(f"delete pod {ns}/{name}", self.api.delete_pod, ns, name, uid, 0)
            if reply.ok:
                deleted.append(name)
            elif reply.status not in (404, 409):
                raise ExecutionError(f"delete pod {ns}/{name}: HTTP {reply.status}: {reply.message}")
        return self._outcome(workload, f"deleted {', '.join(deleted) or 'no pod'} in {ns} with grace 0")


def restore(api: KubeControl, res: Res, namespace: str, name: str, *, retries: int = 3) -> str:
    """Undo a stop: put back the original replicas (or lift Kubeflow's stop); says what it did.

    Raises ``ExecutionError`` when the object is missing or was not stopped by gpusteward.
    """
    what = f"{namespace}/{name}"
    for _ in range(retries + 1):
        try:
            got = api.get(res, namespace, name)
        except SourceError as e:
            raise ExecutionError(f"get {what}: {e}") from e
        if got.status == 404:
            raise ExecutionError(f"{res[2]} {what} not found")
        if not got.ok:
            raise ExecutionError(f"get {what}: HTTP {got.status}: {got.message}")
        ann = annotations_of(got.body)
        original = ann.get(ORIGINAL_REPLICAS_KEY)
        if original is None:
            raise ExecutionError(
                f"{what} has no {ORIGINAL_REPLICAS_KEY} annotation: gpusteward did not stop it"
            )
        cleared: dict[str, Any] = {
            ORIGINAL_REPLICAS_KEY: None,
            STOPPED_AT_KEY: None,
            STOPPED_REASON_KEY: None,
        }
        patch: dict[str, Any] = {"metadata": {"resourceVersion": metadata(got.body).get("resourceVersion")}}
        if KUBEFLOW_STOPPED_KEY in ann:
            cleared[KUBEFLOW_STOPPED_KEY] = None
            done = f"started notebook {what} again (removed {KUBEFLOW_STOPPED_KEY})"
        else:
            try:
                replicas = int(original)
            except ValueError as e:
                raise ExecutionError(f"{what}: {ORIGINAL_REPLICAS_KEY}={original!r} is not a count") from e
            patch["spec"] = {"replicas": replicas}
            done = f"scaled {res[2]} {what} back to {replicas}"
        patch["metadata"]["annotations"] = cleared
        try:
            put = api.patch(res, namespace, name, patch)
        except SourceError as e:
            raise ExecutionError(f"patch {what}: {e}") from e
        if put.status == 409:
            continue
        if not put.ok:
            raise ExecutionError(f"patch {what}: HTTP {put.status}: {put.message}")
        return done
    raise ExecutionError(f"patch {what}: still 409 Conflict after {retries} retries")
