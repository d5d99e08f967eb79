"""Queue figures from hand-built queues, checked against values worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpusteward.analysis.queue_figures import QueueTime, Waiting, queue_figures, queue_time, wait_minutes
from gpusteward.domain.queue import PendingJob, Queue, StartedWait

T = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def job(id: str, queue: str, gpus: int, reason: str, model: str = "") -> PendingJob:
    return PendingJob(id, queue, gpus, T, reason, gpu_model=model)


def waited(queue: str, s: float) -> StartedWait:
    return StartedWait(f"{queue}-{s}", queue, s, T)


PENDING = (
    job("1", "gpu", 4, "Resources", "a100"),
    job("2", "gpu", 2, "Priority", "a100"),  # waits, but not for a free GPU
    job("3", "gpu", 1, "Resources"),  # any model
    job("4", "batch", 8, "QOSGrpGRES", "h100"),  # its own quota: not GPUs waited for
    job("5", "batch", 2, "ReqNodeNotAvail", "h100"),
    job("6", "team-a", 3, "Unschedulable", "h100"),
)


@pytest.mark.parametrize(
    ("key", "where", "want"),
    [
        ("total", None, Waiting(jobs=6, gpu_jobs=4, gpus=4 + 1 + 2 + 3)),
        ("by_queue", "gpu", Waiting(jobs=3, gpu_jobs=2, gpus=5)),
        ("by_queue", "batch", Waiting(jobs=2, gpu_jobs=1, gpus=2)),
        ("by_queue", "team-a", Waiting(jobs=1, gpu_jobs=1, gpus=3)),
        ("by_model", "a100", Waiting(jobs=2, gpu_jobs=1, gpus=4)),
        ("by_model", "h100", Waiting(jobs=3, gpu_jobs=2, gpus=5)),
        ("by_model", "", Waiting(jobs=1, gpu_jobs=1, gpus=1)),
    ],
)
def test_waiting_counts(key: str, where: str | None, want: Waiting) -> None:
    figures = queue_figures(Queue(at=T, pending=PENDING))
    got = getattr(figures, key) if where is None else getattr(figures, key)[where]
    assert got == want


def test_by_model_agrees_with_the_domain_count_of_gpus_waited_for() -> None:
    q = Queue(at=T, pending=PENDING)
    figures = queue_figures(q)
    # The domain's count for a model also takes the "any model" jobs.
    assert q.gpus_waited_for("h100") == figures.by_model["h100"].gpus + figures.by_model[""].gpus == 6
    assert q.gpus_waited_for() == figures.total.gpus


@pytest.mark.parametrize(
    ("waits", "want"),
    [
        ([], QueueTime(started=0, p50_s=None, p95_s=None)),
        ([300.0], QueueTime(started=1, p50_s=300.0, p95_s=300.0)),
        # Sorted 60,120,180,600: p50 halfway 120..180; p95 at rank 2.85: 180 + 0.85 * 420.
        ([600.0, 60.0, 180.0, 120.0], QueueTime(started=4, p50_s=150.0, p95_s=537.0)),
        # p95 at rank 3.8 of 10..50: 40 + 0.8 * 10.
        ([10.0, 20.0, 30.0, 40.0, 50.0], QueueTime(started=5, p50_s=30.0, p95_s=48.0)),
    ],
)
def test_queue_time_percentiles(waits: list[float], want: QueueTime) -> None:
    got = queue_time(waited("q", s) for s in waits)
    assert got.started == want.started
    assert got.p50_s == pytest.approx(want.p50_s)
    assert got.p95_s == pytest.approx(want.p95_s)


def test_queue_time_per_queue_and_overall() -> None:
    started = (waited("gpu", 60), waited("gpu", 180), waited("batch", 1200))
    figures = queue_figures(Queue(at=T, started=started))
    assert figures.time_by_queue["gpu"].p50_s == pytest.approx(120.0)
    assert figures.time_by_queue["batch"] == QueueTime(started=1, p50_s=1200.0, p95_s=1200.0)
    # Overall: 60, 180, 1200 → p50 180; p95 at rank 1.9: 180 + 0.9 * 1020.
    assert figures.time.p50_s == pytest.approx(180.0)
    assert figures.time.p95_s == pytest.approx(1098.0)
    assert figures.total == Waiting()
    assert figures.by_queue == {}
    assert figures.by_model == {}


@pytest.mark.parametrize(
    ("waits_s", "q", "minutes"),
    [
        ((), 50, None),  # nobody started: unknown, not 0
        ((600.0,), 95, 10.0),
        ((60.0, 120.0, 180.0, 600.0), 50, 2.5),  # (120 + 180) / 2 s
        ((60.0, 120.0, 180.0, 660.0), 95, 9.8),  # 180 + 0.85 * 480 = 588 s
    ],
)
def test_wait_minutes(waits_s: tuple[float, ...], q: float, minutes: float | None) -> None:
    assert wait_minutes(waits_s, q) == minutes
