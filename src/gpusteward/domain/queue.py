"""The queue: work waiting for GPUs, and how long started work waited (issue 16).

A scheduler integration (Slurm, Kubernetes) reads its queue each tick into a ``Queue``;
the policy reads it (the ladder moves faster for idle holders of a model others wait for)
and the surfaces export it. Pure values, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

_NOISE = re.compile(r"nvidia|tesla|geforce|[^a-z0-9]")


def _model_key(name: str) -> str:
    return _NOISE.sub("", name.lower())


def same_model(asked: str, have: str) -> bool:
    """Whether a GPU of model ``have`` serves a request for ``asked`` ("" asks for any).

    Schedulers and metrics spell one model differently: Slurm's gres type ``a100``, the
    Kubernetes product label ``NVIDIA-A100-SXM4-80GB``, NVML's ``NVIDIA A100-SXM4-80GB``. Both are
    reduced to letters and digits without the vendor words, and one must contain the other.
    """
    a, h = _model_key(asked), _model_key(have)
    return not a or (bool(h) and (a in h or h in a))


@dataclass(frozen=True, slots=True)
class PendingJob:
    """One job or pod waiting, and what for."""

    id: str
    #: Slurm partition, Kubernetes namespace or Kueue/Volcano queue.
    queue: str
    gpus: int
    submitted_at: datetime
    #: The scheduler's reason (Slurm ``Resources``, ``Priority``, ``QOSGrpGRES``;
    #: Kubernetes ``Unschedulable``).
    reason: str
    #: The GPU model asked for (gres type, node selector), "" when any will do.
    gpu_model: str = ""
    user: str = ""
    source: str = ""

    @property
    def waits_for_gpus(self) -> bool:
        """Held back by GPUs being taken, not by priority or a quota of its own."""
        return self.reason in GPU_WAIT_REASONS


#: Reasons that mean "no free GPU": reclaiming one would let the job start.
GPU_WAIT_REASONS = frozenset({"Resources", "Unschedulable", "Nodes_required", "ReqNodeNotAvail"})


@dataclass(frozen=True, slots=True)
class StartedWait:
    """A job that started: how long it waited in its queue (start - submit)."""

    id: str
    queue: str
    waited_s: float
    started_at: datetime
    gpus: int = 0
    #: The integration that read it: a job id is unique within its source only.
    source: str = ""


@dataclass(frozen=True, slots=True)
class Queue:
    at: datetime
    pending: tuple[PendingJob, ...] = ()
    #: Jobs that started recently (the source's look-back), for queue-time percentiles.
    started: tuple[StartedWait, ...] = ()

    def gpus_waited_for(self, gpu_model: str | None = None) -> int:
        """GPUs asked for by jobs waiting on free GPUs (of one model, or any)."""
        return sum(
            p.gpus
            for p in self.pending
            if p.waits_for_gpus and (gpu_model is None or same_model(p.gpu_model, gpu_model))
        )
