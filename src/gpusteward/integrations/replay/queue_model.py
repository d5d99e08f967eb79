"""A scheduler over a replayed trace's GPUs, so a backtest has a queue (issue 16).

Jobs from a pod list (``pods.py``) arrive over the replay and wait for whole GPUs. A GPU is free
when no trace workload holds it (it has not started, has ended, or gpusteward stopped it) and no
queue job does. The trace's workloads are fixed bookings (they happened): a waiting job starts
only on GPUs that stay free for its whole run. Waiting jobs start first in, first out, and a later
job that fits starts ahead of an earlier one that does not (first-fit backfill); a started job
holds its GPUs for its run time.

The model is event-driven in trace time: it is advanced to each tick's time (events strictly
before it) and reads the stops from the replay's ``released_at`` as they happen. A stop at ``t``
is made after the tick at ``t`` read the queue, and is taken in on the next read, at its own
time; so the queue a backtest's ticks saw and a second pass over the same stops agree.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.queue_figures import wait_minutes
from gpusteward.domain.models import utc
from gpusteward.domain.queue import PendingJob, Queue, StartedWait, same_model
from gpusteward.integrations.replay.pods import QueueJob
from gpusteward.integrations.replay.trace import Trace

#: How far back ``queue`` reports started jobs' waits.
STARTED_LOOKBACK_S = 3600.0


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Queue times of the jobs that arrived during a replay."""

    #: Seconds each job waited: start - arrival, or end - arrival for those that never started
    #: (a lower bound: leaving them out would flatter a run that starts fewer jobs).
    waits_s: tuple[float, ...]
    started: int
    unstarted: int

    def percentile_min(self, q: float) -> float | None:
        return wait_minutes(self.waits_s, q)


class QueueModel:
    """FIFO with first-fit backfill over ``trace``'s GPUs; ``released_at`` is the replay's array of
    stop times per trace workload (read live; inf: never stopped)."""

    def __init__(
        self,
        trace: Trace,
        jobs: Sequence[QueueJob],
        released_at: npt.NDArray[np.float64] | None = None,
        *,
        offset_s: float = 0.0,
        source_name: str = "replay",
    ) -> None:
        self.trace = trace
        self.offset_s = offset_s
        self.source_name = source_name
        n_wl = len(trace.workloads)
        self.released_at = np.full(n_wl, np.inf) if released_at is None else released_at
        self._seen = np.zeros(n_wl, dtype=bool)
        self._first = np.array([w.first_t for w in trace.workloads], dtype=np.float64)
        self._last = np.array([w.last_t for w in trace.workloads], dtype=np.float64)
        by_gpu: list[list[int]] = [[] for _ in trace.gpus]
        for i, w in enumerate(trace.workloads):
            for g in w.gpus:
                by_gpu[g].append(i)
        self._bookings = [sorted(b, key=lambda i: self._first[i]) for b in by_gpu]
        self._done = [0] * len(trace.gpus)  # per GPU, bookings before this one have ended
        self._held_until = [-np.inf] * len(trace.gpus)  # queue jobs' holds
        self._models = [g.model for g in trace.gpus]
        # Arrivals after the replay's end never reach the queue.
        arriving = [(trace.start + j.arrival_s, k, j) for k, j in enumerate(jobs)]
        self.arrivals = sorted((a for a in arriving if a[0] <= trace.end), key=lambda a: (a[0], a[1]))
        self.beyond_replay = len(arriving) - len(self.arrivals)
        self._next_arrival = 0
        self.waiting: list[tuple[float, QueueJob]] = []
        #: Per started job: (arrival, start, job).
        self.started: list[tuple[float, float, QueueJob]] = []
        self._events = [t for t, _, _ in self.arrivals] + self._last.tolist()
        heapq.heapify(self._events)
        self.t = -np.inf  # events before this time are done

    def _end(self, i: int) -> float:
        return min(float(self._last[i]), float(self.released_at[i]))

    def _free_until(self, g: int, t: float) -> float | None:
        """Until when GPU ``g`` is free from ``t`` on (inf: to the end), None: taken at ``t``."""
        if self._held_until[g] > t:
            return None
        books = self._bookings[g]
        k = self._done[g]
        while k < len(books) and self._end(books[k]) <= t:
            k += 1
        self._done[g] = k
        for i in books[k:]:  # sorted by start: the first still running or to come decides
            if self._end(i) > t:
                return None if self._first[i] <= t else float(self._first[i])
        return np.inf

    def _take_releases(self) -> None:
        new = np.flatnonzero(np.isfinite(self.released_at) & ~self._seen)
        self._seen[new] = True
        for r in self.released_at[new].tolist():
            heapq.heappush(self._events, r)

    def _schedule(self, t: float) -> None:
        free = {g: u for g in range(len(self._models)) if (u := self._free_until(g, t)) is not None}
        if not free:
            return
        still: list[tuple[float, QueueJob]] = []
        for arrived, job in self.waiting:
            fits = [
                g
                for g, until in free.items()
                if until >= t + job.duration_s
                and (not job.gpu_models or any(same_model(m, self._models[g]) for m in job.gpu_models))
            ][: job.gpus]
            if len(fits) < job.gpus:
                still.append((arrived, job))
                continue
            end = t + job.duration_s
            for g in fits:
                self._held_until[g] = end
                del free[g]
            heapq.heappush(self._events, end)
            self.started.append((arrived, t, job))
        self.waiting = still

    def advance(self, until: float, *, inclusive: bool = False) -> None:
        """Process every event before trace time ``until`` (and at it, with ``inclusive``)."""
        self._take_releases()
        ev = self._events
        while ev and (ev[0] < until or (inclusive and ev[0] == until)):
            t = heapq.heappop(ev)
            while ev and ev[0] == t:
                heapq.heappop(ev)
            if t < self.t:
                continue  # a stop before the last event done cannot happen in a replay; ignore
            self.t = t
            while self._next_arrival < len(self.arrivals) and self.arrivals[self._next_arrival][0] <= t:
                arrived, _, job = self.arrivals[self._next_arrival]
                self.waiting.append((arrived, job))
                self._next_arrival += 1
            if self.waiting:
                self._schedule(t)

    def queue(self, now: datetime) -> Queue:
        """Implements ``Integration.queue``: the jobs waiting at ``now`` (all for GPUs: reason
        ``Resources``) and those that started in the hour before."""
        t = now.timestamp() - self.offset_s
        self.advance(t)
        pending = tuple(
            PendingJob(
                id=job.id,
                queue=job.queue,
                gpus=job.gpus,
                submitted_at=utc(arrived + self.offset_s),
                reason="Resources",
                gpu_model=job.gpu_models[0] if len(job.gpu_models) == 1 else "",
                source=self.source_name,
            )
            for arrived, job in self.waiting
        )
        started = tuple(
            StartedWait(job.id, job.queue, start - arrived, utc(start + self.offset_s), job.gpus)
            for arrived, start, job in self.started
            if t - STARTED_LOOKBACK_S < start <= t
        )
        return Queue(now, pending, started)

    def finish(self, end: float | None = None) -> QueueStats:
        """Run to the replay's end (``end``, default the trace's) and report every arrival's wait."""
        until = self.trace.end if end is None else end
        self.advance(until, inclusive=True)
        waits = [start - arrived for arrived, start, _ in self.started]
        waits += [until - arrived for arrived, _ in self.waiting]
        return QueueStats(tuple(waits), len(self.started), len(self.waiting))
