"""Consolidation on Kubernetes (L4, behind approval): move one workload at a time from a whole GPU
to the shared resource the nodes expose, and back.

The NVIDIA device plugin advertises a time-sliced GPU as ``nvidia.com/gpu.shared`` (time-slicing
with ``renameByDefault``) and MIG instances as ``nvidia.com/mig-<profile>`` (the mixed strategy).
``share`` rewrites the owner's pod template so its containers ask for that resource instead of
``nvidia.com/gpu``, and writes the containers' original GPU limits and requests into the
``gpusteward.io/original-gpu-resources`` annotation in the same write (as a scale-down records
``gpusteward.io/original-replicas``), so there is never a shared workload without its way back.
``restore`` puts them back. A trial watches the moved workload for a set time; contention in it
rolls the move back, and no other workload moves until it has ended.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpusteward.domain.errors import ExecutionError, PreflightFailed, SourceError
from gpusteward.domain.models import PROTECT_KEY, Decision, Level, Outcome, Workload
from gpusteward.domain.ports import Clock, SystemClock
from gpusteward.integrations.kubernetes.control import ApiReply, Res, annotations_of, metadata
from gpusteward.policy.consolidation import SHARE, UNSHARE, share_resource

log = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
ORIGINAL_GPU_KEY = "gpusteward.io/original-gpu-resources"
SHARED_AS_KEY = "gpusteward.io/shared-as"


class ShareApi(Protocol):
    def get(self, res: Res, namespace: str, name: str) -> ApiReply: ...

    def patch(self, res: Res, namespace: str, name: str, body: Mapping[str, Any]) -> ApiReply: ...

    def list_nodes(self) -> ApiReply: ...


def _containers(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [dict(c) for c in spec.get("containers") or []]


def _gpu_of(c: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    res = c.get("resources") or {}
    return {k: {GPU: str(res[k][GPU])} for k in ("limits", "requests") if GPU in (res.get(k) or {})}


@dataclass
class Trial:
    """A moved workload being watched until ``until`` (monotonic seconds)."""

    res: Res
    namespace: str
    name: str
    until: float


class ConsolidationExecutor:
    def __init__(self, api: ShareApi, *, watch_s: float = 3600.0, contention_share_max: float = 0.01) -> None:
        self.api = api
        self.watch_s = watch_s
        self.contention_share_max = contention_share_max
        self.trial: Trial | None = None

    def get(self, res: Res, ns: str, name: str) -> dict[str, Any]:
        try:
            got = self.api.get(res, ns, name)
        except SourceError as e:
            raise ExecutionError(f"get {ns}/{name}: {e}") from e
        if got.status == 404:
            raise ExecutionError(f"{res[2]} {ns}/{name} not found")
        if not got.ok:
            raise ExecutionError(f"get {ns}/{name}: HTTP {got.status}: {got.message}")
        return dict(got.body)

    def _patch(self, res: Res, ns: str, name: str, body: dict[str, Any]) -> bool:
        """Write; False on a 409 (someone wrote in between: read again)."""
        try:
            put = self.api.patch(res, ns, name, body)
        except SourceError as e:
            raise ExecutionError(f"patch {ns}/{name}: {e}") from e
        if put.status == 409:
            return False
        if not put.ok:
            raise ExecutionError(f"patch {ns}/{name}: HTTP {put.status}: {put.message}")
        return True

    def advertised(self, resource: str) -> int:
        """How many of ``resource`` the nodes offer in all (allocatable)."""
        try:
            nodes = self.api.list_nodes()
        except SourceError as e:
            raise ExecutionError(f"list nodes: {e}") from e
        if not nodes.ok:
            raise ExecutionError(f"list nodes: HTTP {nodes.status}: {nodes.message}")
        total = 0
        for n in nodes.body.get("items") or []:
            value = str(((n.get("status") or {}).get("allocatable") or {}).get(resource, "0"))
            total += int(value) if value.isdigit() else 0
        return total

    def share(self, res: Res, ns: str, name: str, resource: str, *, now_s: float, retries: int = 3) -> str:
        """Move the owner's containers from whole GPUs to ``resource`` (one unit each); says what
        it did. Refused while another workload's trial runs, or when no node offers ``resource``."""
        if (
            self.trial is not None
            and now_s < self.trial.until
            and (self.trial.namespace, self.trial.name) != (ns, name)
        ):
            raise PreflightFailed(
                f"{self.trial.namespace}/{self.trial.name} is still being watched: one move at a time"
            )
        if resource == GPU or not resource.startswith("nvidia.com/"):
            raise PreflightFailed(f"{resource!r} is not a shared GPU resource of the NVIDIA device plugin")
        if self.advertised(resource) == 0:
            raise PreflightFailed(f"no node advertises {resource}: configure time-slicing or MIG first")
        what = f"{res[2]} {ns}/{name}"
        for _ in range(retries + 1):
            obj = self.get(res, ns, name)
            if ORIGINAL_GPU_KEY in annotations_of(obj):
                return f"{what} already shares a GPU ({annotations_of(obj).get(SHARED_AS_KEY, '?')})"
            containers = _containers(obj)
            original = {c["name"]: _gpu_of(c) for c in containers if _gpu_of(c)}
            if not original:
                raise PreflightFailed(f"{what} asks for no {GPU}")
            for c in containers:
                if c["name"] not in original:
                    continue
                r = copy.deepcopy(c.get("resources") or {})
                for kind in original[c["name"]]:
                    r[kind].pop(GPU)
                    r[kind][resource] = "1"
                c["resources"] = r
            patch = {
                "metadata": {
                    "resourceVersion": metadata(obj).get("resourceVersion"),
                    "annotations": {
                        ORIGINAL_GPU_KEY: json.dumps(original, sort_keys=True),
                        SHARED_AS_KEY: resource,
                    },
                },
                "spec": {"template": {"spec": {"containers": containers}}},
            }
            if self._patch(res, ns, name, patch):
                self.trial = Trial(res, ns, name, now_s + self.watch_s)
                return f"{what} now asks for {resource} (original in {ORIGINAL_GPU_KEY})"
        raise ExecutionError(f"patch {what}: still 409 Conflict after {retries} retries")

    def restore(self, res: Res, ns: str, name: str, *, retries: int = 3) -> str:
        """Put back the GPU requests recorded by ``share``. Raises when gpusteward did not move it."""
        what = f"{res[2]} {ns}/{name}"
        for _ in range(retries + 1):
            obj = self.get(res, ns, name)
            ann = annotations_of(obj)
            if ORIGINAL_GPU_KEY not in ann:
                raise ExecutionError(
                    f"{what} has no {ORIGINAL_GPU_KEY} annotation: gpusteward did not move it"
                )
            try:
                original: dict[str, dict[str, dict[str, str]]] = json.loads(ann[ORIGINAL_GPU_KEY])
            except ValueError as e:
                raise ExecutionError(f"{what}: {ORIGINAL_GPU_KEY} is not JSON") from e
            shared = ann.get(SHARED_AS_KEY, "")
            containers = _containers(obj)
            for c in containers:
                if c["name"] not in original:
                    continue
                r = copy.deepcopy(c.get("resources") or {})
                for kind, values in original[c["name"]].items():
                    r.setdefault(kind, {}).pop(shared, None)
                    r[kind].update(values)
                c["resources"] = r
            patch = {
                "metadata": {
                    "resourceVersion": metadata(obj).get("resourceVersion"),
                    "annotations": {ORIGINAL_GPU_KEY: None, SHARED_AS_KEY: None},
                },
                "spec": {"template": {"spec": {"containers": containers}}},
            }
            if self._patch(res, ns, name, patch):
                if self.trial is not None and (self.trial.namespace, self.trial.name) == (ns, name):
                    self.trial = None
                return f"{what} asks for whole GPUs again ({shared} given back)"
        raise ExecutionError(f"patch {what}: still 409 Conflict after {retries} retries")

    def watch(self, contention_share: float, *, now_s: float) -> str:
        """Judge the running trial on the contention its GPU showed since the move (share of
        minutes with utilisation summed over 100 %): ``rolled-back``, ``kept`` (the watch ended
        clean) or ``watching``."""
        trial = self.trial
        if trial is None:
            return "none"
        if contention_share > self.contention_share_max:
            said = self.restore(trial.res, trial.namespace, trial.name)
            log.warning(
                "rolled back %s/%s on contention %.2f %%: %s",
                trial.namespace,
                trial.name,
                100 * contention_share,
                said,
            )
            return "rolled-back"
        if now_s >= trial.until:
            self.trial = None
            return "kept"
        return "watching"


class ConsolidationMover:
    """Implements ``Executor`` for the tick's consolidation decisions (L4 ``share-gpu`` and
    ``unshare-gpu``) on Kubernetes workloads whose owner can be rewritten (Deployment,
    StatefulSet, ...). The resource comes from the decision's key (policy/consolidation.py), so
    a crash between the record and the write retries the same move. The watch is the tick's
    (policy/consolidation.py): this executor keeps no trial of its own."""

    def __init__(
        self,
        api: ShareApi,
        fresh: Callable[[Workload], Workload | None],
        *,
        source: str = "kubernetes",
        conflict_retries: int = 3,
        refuse: Callable[[str], str | None] = lambda ns: None,
        clock: Clock | None = None,
    ) -> None:
        self.name = source
        self.fresh = fresh
        self.refuse = refuse
        self.retries = conflict_retries
        self.clock = clock or SystemClock()
        self.moves = ConsolidationExecutor(api, watch_s=0.0)

    def supports(self, workload: Workload, level: Level) -> bool:
        return level is Level.INFRA and workload.source == self.name and workload.ref.get("mode") == "scale"

    def current(self, workload: Workload) -> Workload | None:
        try:
            return self.fresh(workload)
        except SourceError as e:
            raise ExecutionError(f"cannot re-read {workload.id} now, nothing done: {e}") from e

    @staticmethod
    def _where(workload: Workload) -> tuple[Res, str, str]:
        ref = workload.ref
        res = (ref.get("group", ""), ref.get("version", ""), ref.get("plural", ""), True)
        return res, ref.get("namespace", ""), ref.get("name", "")

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        res, ns, name = self._where(workload)
        if decision.step == SHARE.name:
            why = self.refuse(ns)
            if why is not None:
                raise PreflightFailed(why)
            if (workload.tag(PROTECT_KEY) or "").strip().lower() == "true":
                raise PreflightFailed(f"{workload.id} carries {PROTECT_KEY}=true")
            resource = share_resource(decision.idempotency_key)
            if not resource:
                raise ExecutionError(f"{decision.idempotency_key!r} names no shared resource")
            done = self.moves.share(
                res, ns, name, resource, now_s=self.clock.monotonic(), retries=self.retries
            )
        elif decision.step == UNSHARE.name:
            done = self.moves.restore(res, ns, name, retries=self.retries)
        else:
            raise ExecutionError(f"{decision.step} is not something the consolidation mover does")
        return Outcome(True, done, verified=self.verify(decision, workload))

    def verify(self, decision: Decision, workload: Workload) -> bool:
        res, ns, name = self._where(workload)
        ann = annotations_of(self.moves.get(res, ns, name))
        if decision.step == SHARE.name:
            return ann.get(SHARED_AS_KEY) == share_resource(decision.idempotency_key)
        return ORIGINAL_GPU_KEY not in ann
