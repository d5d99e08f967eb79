"""Slurm's queue (issue 16): pending GPU jobs with their reason, and how long started jobs waited.

One ``squeue`` (or, without JSON, ``scontrol show job``) per tick reads pending and running jobs.
Queue times come from ``sacct`` where accounting exists (every start in the look-back, also of
jobs that have ended since), else from the running jobs' start - submit (jobs that started and
ended within the look-back are missed there). ``auto`` tries sacct once and, where accounting is
disabled or sacct is missing, stays with squeue for good.

Every failure to read the job table is a ``SourceError`` naming the queue, for the runtime to log;
it never touches ``observe()``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Literal, Protocol

from gpusteward.domain.errors import SourceError, SourceUnavailable
from gpusteward.domain.queue import PendingJob, Queue, StartedWait
from gpusteward.integrations.slurm.commands import SlurmCommandFailed
from gpusteward.integrations.slurm.model import JobView, SacctStart, SlurmJob

log = logging.getLogger(__name__)

StartsFrom = Literal["auto", "sacct", "squeue"]


class QueueReader(Protocol):
    """What the queue needs of Slurm (``SlurmClient``, or a fake in tests)."""

    def queue_jobs(self) -> tuple[JobView, list[str]]: ...

    def starts(self, since: datetime, until: datetime) -> tuple[list[SacctStart], list[str]]: ...


def pending_jobs(jobs: Iterable[SlurmJob], now: datetime, source: str = "slurm") -> list[PendingJob]:
    """Pending jobs that ask for GPUs (a CPU job's wait is no GPU's concern); one without a submit
    time counts as submitted ``now``."""
    out = []
    for job in jobs:
        if not job.pending or job.gpu_count <= 0:
            continue
        out.append(
            PendingJob(
                id=job.display_id,
                queue=job.partition,
                gpus=job.gpu_count * job.array_tasks,
                submitted_at=job.submitted_at or now,
                reason=job.reason,
                gpu_model=job.gpu_type,
                user=job.user,
                source=source,
            )
        )
    return out


def running_waits(jobs: Iterable[SlurmJob], since: datetime) -> list[StartedWait]:
    """Start - submit of running GPU jobs that started at or after ``since``."""
    out = []
    for job in jobs:
        if not job.running or job.started_at is None or job.submitted_at is None:
            continue
        if job.started_at < since or job.gpu_count <= 0:
            continue
        waited = max(0.0, (job.started_at - job.submitted_at).total_seconds())
        out.append(StartedWait(job.display_id, job.partition, waited, job.started_at, job.gpu_count))
    return out


def sacct_waits(starts: Iterable[SacctStart], since: datetime) -> list[StartedWait]:
    """Start - submit of GPU allocations sacct shows starting at or after ``since``."""
    return [
        StartedWait(
            s.job_id,
            s.partition,
            max(0.0, (s.started_at - s.submitted_at).total_seconds()),
            s.started_at,
            s.gpus,
        )
        for s in starts
        if s.started_at >= since and s.gpus > 0
    ]


class SlurmQueue:
    """``Integration.queue`` for Slurm: ``queue(now)`` reads the controller once (twice with sacct)."""

    def __init__(
        self,
        reader: QueueReader,
        *,
        lookback_s: float = 3600.0,
        starts_from: StartsFrom = "auto",
        source: str = "slurm",
    ) -> None:
        self.reader = reader
        self.lookback_s = lookback_s
        self.starts_from: StartsFrom = starts_from
        self.source = source
        #: What the last read could not take (unreadable job lines), for the tick's log.
        self.problems: list[str] = []

    def _sacct(self, since: datetime, now: datetime) -> list[StartedWait] | None:
        """Waits from sacct; None where auto finds no accounting (and gives sacct up)."""
        try:
            starts, problems = self.reader.starts(since, now)
        except (SlurmCommandFailed, SourceUnavailable) as e:
            if self.starts_from != "auto":
                raise SourceError(f"slurm queue: sacct cannot give queue times: {e}") from e
            log.warning("slurm queue: no sacct (%s); queue times come from running jobs from now on", e)
            self.starts_from = "squeue"
            return None
        self.problems.extend(problems)
        return sacct_waits(starts, since)

    def __call__(self, now: datetime) -> Queue:
        try:
            view, problems = self.reader.queue_jobs()
        except SourceError as e:
            raise SourceError(f"slurm queue: cannot read pending jobs: {e}") from e
        self.problems = list(problems)
        since = now - timedelta(seconds=self.lookback_s)
        started = None
        if self.starts_from != "squeue":
            try:
                started = self._sacct(since, now)
            except SourceError as e:
                # Pending work is worth having without sacct's queue times.
                log.warning("%s", e)
                self.problems.append(str(e))
        if started is None:
            started = running_waits(view.jobs, since)
        return Queue(
            at=now,
            pending=tuple(pending_jobs(view.jobs, now, self.source)),
            started=tuple(sorted(started, key=lambda w: w.started_at)),
        )
