"""The queue's figures (issue 16): jobs waiting, GPUs waited for, and queue time percentiles.

Pure: a ``Queue`` in, numbers out, per queue (Slurm partition, Kubernetes queue or namespace),
per GPU model and overall. Every waiting job counts as waiting; only those held back by GPUs
being taken (``PendingJob.waits_for_gpus``) count towards GPUs waited for, since reclaiming a GPU
does nothing for a job behind a dependency or its own quota. Queue times come from jobs that
started within the source's look-back (start - submit); with none, a percentile is None, not 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpusteward.domain.queue import PendingJob, Queue, StartedWait


@dataclass(frozen=True, slots=True)
class Waiting:
    """Jobs waiting (any reason) and the GPUs asked for by those waiting on free GPUs."""

    jobs: int = 0
    gpu_jobs: int = 0
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class QueueTime:
    """Seconds waited by started jobs; None where no job started."""

    started: int = 0
    p50_s: float | None = None
    p95_s: float | None = None


@dataclass(frozen=True, slots=True)
class QueueFigures:
    total: Waiting = Waiting()
    by_queue: dict[str, Waiting] = field(default_factory=dict)
    #: Keyed by GPU model; "" holds the jobs that take any model.
    by_model: dict[str, Waiting] = field(default_factory=dict)
    time: QueueTime = QueueTime()
    time_by_queue: dict[str, QueueTime] = field(default_factory=dict)


def _waiting(jobs: Iterable[PendingJob]) -> Waiting:
    jobs = list(jobs)
    gpu = [j for j in jobs if j.waits_for_gpus]
    return Waiting(jobs=len(jobs), gpu_jobs=len(gpu), gpus=sum(j.gpus for j in gpu))


def wait_minutes(waits_s: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile of waits in seconds, in minutes to 0.1 (numpy's linear
    interpolation, as ``queue_time``); None for no waits."""
    if not waits_s:
        return None
    return round(float(np.percentile(np.asarray(waits_s, dtype=np.float64), q)) / 60.0, 1)


def queue_time(waits: Iterable[StartedWait]) -> QueueTime:
    """p50/p95 of the waits (numpy's linear interpolation); None for no waits."""
    s = np.asarray([w.waited_s for w in waits], dtype=np.float64)
    if s.size == 0:
        return QueueTime()
    p50, p95 = np.percentile(s, [50, 95])
    return QueueTime(started=int(s.size), p50_s=float(p50), p95_s=float(p95))


def queue_figures(queue: Queue) -> QueueFigures:
    queues = sorted({p.queue for p in queue.pending})
    models = sorted({p.gpu_model for p in queue.pending})
    started_queues = sorted({s.queue for s in queue.started})
    return QueueFigures(
        total=_waiting(queue.pending),
        by_queue={q: _waiting(p for p in queue.pending if p.queue == q) for q in queues},
        by_model={m: _waiting(p for p in queue.pending if p.gpu_model == m) for m in models},
        time=queue_time(queue.started),
        time_by_queue={q: queue_time(s for s in queue.started if s.queue == q) for q in started_queues},
    )
