"""A spot interruption on Kubernetes: ask each pod to checkpoint through an annotation.

A container cannot be sent a signal through the API, so the checkpoint request is the pod
annotation ``gpusteward.io/checkpoint-requested-at`` (the notice's time, RFC 3339). A workload
reads it from a downward-API volume (``metadata.annotations``: the kubelet updates the file in
place) or a sidecar, and saves. The pod is read first and patched with its resourceVersion, so an
annotation never lands on another pod of the same name (a 409 re-reads, bounded).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from gpusteward.domain.errors import ExecutionError
from gpusteward.domain.models import Outcome, Workload
from gpusteward.integrations.kubernetes.control import PODS, ApiReply, KubeControl, metadata, rfc3339
from gpusteward.integrations.kubernetes.podref import pods_of

CHECKPOINT_REQUESTED_KEY = "gpusteward.io/checkpoint-requested-at"

Call = Callable[..., ApiReply]


def request_checkpoint(
    api: KubeControl, workload: Workload, at: datetime, call: Callable[..., ApiReply], retries: int = 3
) -> Outcome:
    """Annotate every pod of this incarnation; ``ExecutionError`` when the API refuses."""
    ns = workload.ref.get("namespace", "")
    done, gone = [], []
    for name, uid in pods_of(workload.ref):
        if _annotate(api, call, ns, name, uid, rfc3339(at), retries):
            done.append(name)
        else:
            gone.append(name)
    if not done:
        return Outcome(
            True, f"no pod of {workload.id} left to ask ({', '.join(gone) or 'none'})", verified=True
        )
    return Outcome(True, f"annotated {CHECKPOINT_REQUESTED_KEY} on {', '.join(done)} in {ns}", verified=True)


def _annotate(api: KubeControl, call: Call, ns: str, name: str, uid: str, when: str, retries: int) -> bool:
    for _ in range(retries + 1):
        reply = call(f"get pod {ns}/{name}", api.get, PODS, ns, name)
        if reply.status == 404:
            return False
        if not reply.ok:
            raise ExecutionError(f"get pod {ns}/{name}: HTTP {reply.status}: {reply.message}")
        meta = metadata(reply.body)
        if str(meta.get("uid", "")) != uid:
            return False  # another pod by that name: not ours to touch
        if (meta.get("annotations") or {}).get(CHECKPOINT_REQUESTED_KEY) == when:
            return True
        patch = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {CHECKPOINT_REQUESTED_KEY: when},
            }
        }
        written = call(f"annotate pod {ns}/{name}", api.patch, PODS, ns, name, patch)
        if written.ok:
            return True
        if written.status == 404:
            return False
        if written.status != 409:
            raise ExecutionError(f"annotate pod {ns}/{name}: HTTP {written.status}: {written.message}")
    raise ExecutionError(f"annotate pod {ns}/{name}: still conflicting after {retries} retries")
