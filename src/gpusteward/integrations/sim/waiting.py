"""The simulated scheduler's queue as a scheduler would show it (``domain.queue.Queue``), and
the queue times of a whole run for the demo. Mixed into ``SimCluster``.

Every waiting arrival waits for GPUs (reason ``Resources``): the simulator has no priorities or
quotas. A job's queue is its team's (a Slurm partition or Kubernetes namespace of its own).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gpusteward.domain.models import Gpu
from gpusteward.domain.queue import PendingJob, Queue, StartedWait
from gpusteward.integrations.sim.runs import Run
from gpusteward.integrations.sim.scenarios import Arrival

#: How far back ``queue`` reports started jobs' waits.
STARTED_LOOKBACK_S = 3600.0


class Waiting:
    start: datetime
    gpus: tuple[Gpu, ...]
    source_name: str
    _queue: list[Arrival]
    _runs: dict[str, Run]
    _t: float

    def advance_to(self, now: datetime) -> None:
        raise NotImplementedError

    def queue(self, now: datetime, lookback_s: float = STARTED_LOOKBACK_S) -> Queue:
        """Advance to ``now``: jobs waiting, and those that started in the last ``lookback_s``."""
        self.advance_to(now)
        model = self.gpus[0].model

        def at(s: float) -> datetime:
            return self.start + timedelta(seconds=s)

        pending = tuple(
            PendingJob(
                id=a.workload_id,
                queue=a.row.team,
                gpus=a.gpus,
                submitted_at=at(a.at_s),
                reason="Resources",
                gpu_model=model,
                user=a.user,
                source=self.source_name,
            )
            for a in self._queue
        )
        t = (now - self.start).total_seconds()
        started = tuple(
            StartedWait(
                r.workload.id,
                r.arrival.row.team,
                r.start_s - r.arrival.at_s,
                at(r.start_s),
                len(r.gpu_idx),
            )
            for r in self._runs.values()
            if t - lookback_s < r.start_s <= t
        )
        return Queue(now, pending, started)

    def queue_waits(self, since: datetime, until: datetime) -> list[float]:
        """Seconds waited by every job submitted in [since, until): start - submit for those that
        started by ``until``, ``until`` - submit for those still waiting (a lower bound: leaving
        them out would flatter a run that starts fewer jobs)."""
        a, u = (since - self.start).total_seconds(), (until - self.start).total_seconds()
        self.advance_to(until)
        out = [
            r.start_s - r.arrival.at_s
            for r in self._runs.values()
            if a <= r.arrival.at_s < u and r.start_s <= u
        ]
        return out + [u - q.at_s for q in self._queue if a <= q.at_s < u]
