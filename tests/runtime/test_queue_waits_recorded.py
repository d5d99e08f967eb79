"""The loop keeps the started jobs' queue waits for the reports (issue 16): the leader writes
each job once however many ticks its source's look-back shows it; a follower writes none."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpusteward.domain.queue import PendingJob, Queue, StartedWait
from gpusteward.runtime.queues import QueueReader


class NeverLeader:
    name = "test"

    def acquire(self) -> bool:
        return False

    def release(self) -> None:
        pass


def _slurm(start: datetime) -> QueueReader:
    """A Slurm queue whose look-back (an hour) shows job 11 from the start and job 12 from
    ten minutes in, with a job still waiting all along."""

    def read(now: datetime) -> Queue:
        started = [StartedWait("11", "gpu", 300.0, start, 4)]
        if now >= start + timedelta(minutes=10):
            started.append(StartedWait("12", "a100", 1800.0, start + timedelta(minutes=10), 8))
        waiting = PendingJob("13", "gpu", 2, start, "Resources")
        return Queue(now, (waiting,), tuple(started))

    return QueueReader([("slurm", read)])


def test_the_leader_keeps_each_started_job_once(make_steward, run_for) -> None:
    steward, _, clock, _ = make_steward()
    start = clock.now()
    steward.queues = _slurm(start)
    reports = run_for(steward, clock, minutes=30)
    assert all(r.leader for r in reports)
    assert sum(len(r.queue.started) for r in reports) == 30 + 20  # seen 50 times in all
    kept = steward.store.queue_waits(start - timedelta(days=1), clock.now())
    assert [(w.source, w.id, w.queue, w.waited_s, w.gpus) for w in kept] == [
        ("slurm", "11", "gpu", 300.0, 4),
        ("slurm", "12", "a100", 1800.0, 8),
    ]
    assert [w.started_at for w in kept] == [start, start + timedelta(minutes=10)]


def test_a_follower_keeps_no_queue_wait(make_steward, run_for) -> None:
    steward, _, clock, _ = make_steward()
    start = clock.now()
    steward.queues = _slurm(start)
    steward.leadership = NeverLeader()
    reports = run_for(steward, clock, minutes=30)
    assert not any(r.leader for r in reports)
    assert all(r.queue is not None and r.queue.started for r in reports)  # it read the queue
    assert steward.store.queue_waits(start - timedelta(days=1), clock.now()) == []
