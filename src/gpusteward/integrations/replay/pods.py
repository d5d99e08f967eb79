"""Arrivals for the replay's queue: a pod list in the Alibaba GPU trace's format.

``openb_pod_list_default.csv`` (alibaba/clusterdata, cluster-trace-gpu-v2023) has one row per pod:
``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time,
deletion_time, scheduled_time``, times in seconds from the trace's start. Each row that asks for
whole GPUs becomes a job arriving at its ``creation_time`` and running for
``deletion_time - scheduled_time``; the rest are counted by why they were left out.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from gpusteward.domain.errors import ConfigError

REQUIRED = ("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time")
#: ``gpu_milli`` of a whole GPU: below it a pod shares its GPU with others.
WHOLE_GPU_MILLI = 1000
#: Reasons a row is not a job, as counted in ``PodList.skipped``.
NO_GPU = "no_gpu"
FRACTIONAL = "fractional_gpu"
NEVER_SCHEDULED = "never_scheduled"
NO_RUN_TIME = "no_run_time"


@dataclass(frozen=True, slots=True)
class QueueJob:
    """One arriving job: wants ``gpus`` whole GPUs for ``duration_s``."""

    id: str
    gpus: int
    #: Seconds after the pod list's first creation time (scaled); the run time is not.
    arrival_s: float
    duration_s: float
    #: The pod's QoS class (LS, BE, Burstable, Guaranteed) stands for its queue.
    queue: str = "default"
    #: GPU models it accepts (``gpu_spec``, ``|``-separated); empty: any.
    gpu_models: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PodList:
    jobs: tuple[QueueJob, ...]
    rows: int
    #: Rows left out, by reason (``NO_GPU``, ``FRACTIONAL``, ``NEVER_SCHEDULED``, ``NO_RUN_TIME``).
    skipped: dict[str, int] = field(default_factory=dict)


def _int(row: dict[str, str], key: str, line: int, path: Path) -> int | None:
    text = (row.get(key) or "").strip()
    if not text:
        return None
    try:
        return int(float(text))
    except ValueError:
        raise ConfigError(f"{key}: not a number: {text!r}", path=str(path), line=line) from None


def load_pod_list(path: Path, *, scale: float = 1.0) -> PodList:
    """The whole-GPU jobs of the pod list at ``path``, their arrival times times ``scale``.

    Arrivals count from the earliest ``creation_time`` in the file, so a slice cut from the middle
    of the trace starts with the replay. Only arrivals are scaled, run times are the pods' own: a
    scale of 1/k fits k days of pods into one day and asks k times as much of the cluster at once.
    """
    if not scale > 0 or scale == float("inf"):
        raise ConfigError(f"the queue's time scale must be a positive number, not {scale!r}")
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [k for k in REQUIRED if k not in (reader.fieldnames or ())]
            if missing:
                raise ConfigError(
                    f"not a pod list (openb_pod_list format): no {', '.join(missing)} column",
                    path=str(path),
                    line=1,
                )
            rows = [(n, r) for n, r in enumerate(reader, start=2)]
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the pod list: {e}", path=str(path)) from e
    skipped: Counter[str] = Counter()
    parsed: list[tuple[dict[str, str], int, int, int, int]] = []
    first: int | None = None
    for line, row in rows:
        created = _int(row, "creation_time", line, path)
        if created is None:
            raise ConfigError("creation_time: empty", path=str(path), line=line)
        first = created if first is None else min(first, created)
        gpus, milli = _int(row, "num_gpu", line, path) or 0, _int(row, "gpu_milli", line, path) or 0
        sched, deleted = _int(row, "scheduled_time", line, path), _int(row, "deletion_time", line, path)
        if gpus <= 0:
            skipped[NO_GPU] += 1
        elif milli < WHOLE_GPU_MILLI:
            skipped[FRACTIONAL] += 1
        elif sched is None or deleted is None:
            skipped[NEVER_SCHEDULED] += 1  # pending or deleted before it ran: no run time to replay
        elif deleted <= sched:
            skipped[NO_RUN_TIME] += 1
        else:
            parsed.append((row, created, gpus, sched, deleted))
    jobs = tuple(
        QueueJob(
            id=row["name"],
            gpus=gpus,
            arrival_s=(created - (first or 0)) * scale,
            duration_s=float(deleted - sched),
            queue=(row.get("qos") or "").strip() or "default",
            gpu_models=tuple(m for m in (row.get("gpu_spec") or "").split("|") if m.strip()),
        )
        for row, created, gpus, sched, deleted in parsed
    )
    return PodList(jobs, len(rows), dict(sorted(skipped.items())))
