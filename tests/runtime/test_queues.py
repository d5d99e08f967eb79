"""The schedulers' queues in the tick (issue 16): read once a tick, merged, a failure never ends
the tick, and jobs waiting for the cluster's GPU model bring its idle holders' stops forward."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from gpusteward.domain.models import ActionStatus, Level
from gpusteward.domain.queue import PendingJob, Queue, StartedWait
from gpusteward.runtime.queues import QueueReader, merge
from gpusteward.store.db import StateStore

T0 = datetime.fromisoformat("2025-03-04T09:00:00+00:00")


def _job(i: int, gpus: int = 4, model: str = "h100", source: str = "") -> PendingJob:
    return PendingJob(f"j{i}", "gpu", gpus, T0 - timedelta(hours=1), "Resources", model, source=source)


def _broken(now: datetime) -> Queue:
    raise RuntimeError("squeue: connection refused")


def test_queues_of_several_systems_merge_and_keep_their_source() -> None:
    slurm = Queue(T0, (_job(1),), (StartedWait("s1", "gpu", 60.0, T0),))
    k8s = Queue(T0 + timedelta(seconds=5), (_job(2, 8, source="kubernetes"),))
    reader = QueueReader([("slurm", lambda now: slurm), ("k8s", lambda now: k8s)])
    errors: list[str] = []
    q = reader.read(T0, errors)
    assert errors == []
    assert q is not None
    assert q.at == T0 + timedelta(seconds=5)
    assert [(p.id, p.source) for p in q.pending] == [("j1", "slurm"), ("j2", "kubernetes")]
    assert q.gpus_waited_for("h100") == 12
    assert [s.id for s in q.started] == ["s1"]
    assert reader.latest == q


def test_a_failing_queue_is_an_error_line_and_the_others_still_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = QueueReader([("slurm", _broken), ("k8s", lambda now: Queue(now, (_job(1),)))])
    errors: list[str] = []
    q = reader.read(T0, errors)
    assert errors == ["queue of slurm failed: squeue: connection refused"]
    assert "queue of slurm could not be read" in caplog.text
    assert q is not None
    assert [p.id for p in q.pending] == ["j1"]


def test_no_queue_read_is_none_not_an_empty_queue() -> None:
    assert QueueReader([("slurm", _broken)]).read(T0, []) is None
    assert QueueReader().read(T0, []) is None
    assert merge([]) is None
    assert merge([Queue(T0)]) == Queue(T0)


def _stops(store: StateStore) -> dict[str, datetime]:
    return {
        a.workload_id: a.created_at
        for a in store.actions(limit=10_000)
        if a.level is Level.GRACEFUL_STOP and a.status is ActionStatus.SUCCEEDED
    }


def test_a_failing_queue_never_stops_the_tick_and_leaves_the_ladder_alone(
    make_steward, run_for, settings_for, tmp_path
) -> None:
    plain, _, clock, _ = make_steward()
    plain_reports = run_for(plain, clock, minutes=120)
    failing, _, clock2, _ = make_steward(settings_for(store={"url": f"sqlite:///{tmp_path / 'b.db'}"}))
    failing.queues = QueueReader([("slurm", _broken)])
    reports = run_for(failing, clock2, minutes=120)
    assert len(reports) == len(plain_reports) == 120
    assert all("queue of slurm failed: squeue: connection refused" in r.errors for r in reports)
    assert all(r.queue is None for r in reports)
    # Unknown demand is the normal pace: the same stops at the same times.
    assert _stops(plain.store)
    assert _stops(failing.store) == _stops(plain.store)


def test_jobs_waiting_for_the_clusters_model_bring_the_stops_forward(
    make_steward, run_for, settings_for, tmp_path
) -> None:
    plain, _, clock, _ = make_steward()
    run_for(plain, clock, minutes=120)
    busy, _, clock2, notifier = make_steward(settings_for(store={"url": f"sqlite:///{tmp_path / 'b.db'}"}))
    waiting = Queue(T0, tuple(_job(i, model="a100") for i in range(12)))  # the sim's GPUs are A100s
    busy.queues = QueueReader([("slurm", lambda now: waiting)])
    reports = run_for(busy, clock2, minutes=120)
    assert reports[-1].queue is not None
    assert reports[-1].queue.gpus_waited_for("a100") == 48
    before, after = _stops(plain.store), _stops(busy.store)
    assert set(after) == set(before)  # the same workloads, sooner: nothing extra is stopped
    for w, at in after.items():
        assert at < before[w]
        # 30 min of warnings become 7.5 (min_factor 0.25), never less: a tick late at most.
        assert before[w] - at <= timedelta(minutes=30 - 7.5 + 1)
    # The owner's notices say who waits and when the GPU is reclaimed.
    told = [n.body for n in notifier.sent if n.workload_id in after and n.level is Level.NOTIFY]
    assert told
    assert all("12 jobs are waiting for 48 free A100-SXM4-80GB GPUs" in b for b in told)
    assert any("your idle A100-SXM4-80GB will be reclaimed in 8 min, at " in b for b in told)


class _Waits:
    """A QueueWaitLog that records what each write was sent (and can fail once)."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []
        self.fail = False

    def record_queue_waits(self, waits: object, at: datetime) -> None:
        from gpusteward.domain.errors import StoreError

        if self.fail:
            self.fail = False
            raise StoreError("database gone")
        self.sent.append([w.id for w in waits])  # type: ignore[attr-defined]

    def queue_waits(self, since: datetime, until: datetime) -> list[StartedWait]:
        return []


def test_a_wait_the_look_back_shows_again_is_written_once() -> None:
    def started(*ids: str) -> Queue:
        return Queue(T0, started=tuple(StartedWait(i, "gpu", 60.0, T0, 1, source="slurm") for i in ids))

    reader, store = QueueReader(), _Waits()
    reader.record(store, started("1", "2"), T0)
    reader.record(store, started("1", "2"), T0 + timedelta(seconds=30))  # nothing new: no write
    reader.record(store, started("2", "3"), T0 + timedelta(seconds=60))  # "1" left the look-back
    reader.record(store, None, T0 + timedelta(seconds=90))  # no queue read: nothing written
    store.fail = True
    reader.record(store, started("2", "3", "4"), T0 + timedelta(seconds=120))  # lost: sent again
    reader.record(store, started("2", "3", "4"), T0 + timedelta(seconds=150))
    assert store.sent == [["1", "2"], ["3"], ["4"]]
