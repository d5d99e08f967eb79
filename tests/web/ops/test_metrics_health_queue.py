"""/metrics for issue 16: GPUs per health state and the queue's gauges, from hand-made TickReports."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpusteward.domain.health import Health
from gpusteward.domain.queue import PendingJob, Queue, StartedWait
from gpusteward.integrations.sim import DEFAULT_START, SimClock
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.loop import Steward
from gpusteward.runtime.tick_report import TickReport
from gpusteward.web.metrics import StewardMetrics

AT = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
QUEUE_NAMES = ("gpusteward_jobs_waiting", "gpusteward_gpus_waited_for", "gpusteward_queue_time_seconds")


@pytest.fixture(scope="module")
def steward(tmp_path_factory: pytest.TempPathFactory) -> Steward:
    tmp: Path = tmp_path_factory.mktemp("metrics")
    settings = load_settings(
        None,
        mode="dry-run",
        source={"name": "sim", "sim": {"scenario": "small", "history_hours": 1}},
        store={"url": f"sqlite:///{tmp / 'state.db'}"},
    )
    s, _ = build_steward(settings, clock=SimClock(DEFAULT_START))
    return s


def _report(queue: Queue | None = None, **extra: object) -> TickReport:
    r = TickReport(AT, True, 4, 0, (), (), (), 0, False, queue=queue)
    return dataclasses.replace(r, **extra) if extra else r


def _series(metrics: StewardMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = metrics.render().decode()
    return {
        tuple(sorted(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name
    }


def _job(id: str, queue: str, gpus: int, model: str = "", reason: str = "Resources") -> PendingJob:
    return PendingJob(id, queue, gpus, AT - timedelta(minutes=5), reason, gpu_model=model)


def _waits(queue: str, *seconds: float) -> tuple[StartedWait, ...]:
    return tuple(StartedWait(f"{queue}-{i}", queue, s, AT) for i, s in enumerate(seconds))


QUEUE = Queue(
    AT,
    pending=(
        _job("1", "gpu", 2, "H100"),
        _job("2", "gpu", 1, "H100"),
        _job("3", "gpu", 4),  # any model
        _job("4", "gpu", 8, "H100", reason="Priority"),  # waiting, but not for GPUs
        _job("5", "debug", 1, "A100"),
    ),
    # p50 of 10, 20, 30, 40, 100: 30; p95 (linear): 40 + 0.8 * 60 = 88.
    started=_waits("gpu", 10, 20, 30, 40, 100) + _waits("debug", 60),
)


def test_queue_gauges_show_the_figures(steward: Steward) -> None:
    m = StewardMetrics()
    m.record(steward, _report(QUEUE), 0.01)
    assert _series(m, "gpusteward_jobs_waiting") == {
        (("queue", "gpu"),): 4.0,
        (("queue", "debug"),): 1.0,
    }
    assert _series(m, "gpusteward_gpus_waited_for") == {
        (("model", "H100"), ("queue", "gpu")): 3.0,  # job 4 waits on priority, not GPUs
        (("model", "any"), ("queue", "gpu")): 4.0,
        (("model", "A100"), ("queue", "debug")): 1.0,
    }
    assert _series(m, "gpusteward_queue_time_seconds") == {
        (("quantile", "0.5"), ("queue", "gpu")): 30.0,
        (("quantile", "0.95"), ("queue", "gpu")): pytest.approx(88.0),
        (("quantile", "0.5"), ("queue", "debug")): 60.0,
        (("quantile", "0.95"), ("queue", "debug")): 60.0,
    }


def test_series_of_a_queue_that_emptied_are_removed(steward: Steward) -> None:
    m = StewardMetrics()
    m.record(steward, _report(QUEUE), 0.01)
    only_gpu = Queue(AT, pending=(_job("1", "gpu", 2, "H100"),), started=_waits("gpu", 50))
    m.record(steward, _report(only_gpu), 0.01)
    assert _series(m, "gpusteward_jobs_waiting") == {(("queue", "gpu"),): 1.0}
    assert _series(m, "gpusteward_gpus_waited_for") == {(("model", "H100"), ("queue", "gpu")): 2.0}
    assert _series(m, "gpusteward_queue_time_seconds") == {
        (("quantile", "0.5"), ("queue", "gpu")): 50.0,
        (("quantile", "0.95"), ("queue", "gpu")): 50.0,
    }
    m.record(steward, _report(Queue(AT)), 0.01)  # read, and nobody waits: no series left
    for name in QUEUE_NAMES:
        assert _series(m, name) == {}, name


def test_an_unread_queue_clears_the_gauges(steward: Steward) -> None:
    m = StewardMetrics()
    m.record(steward, _report(QUEUE), 0.01)
    m.record(steward, _report(None), 0.01)
    for name in QUEUE_NAMES:
        assert _series(m, name) == {}, name
    m.record(steward, _report(QUEUE), 0.01)  # and they come back with the next read
    assert _series(m, "gpusteward_jobs_waiting")[(("queue", "debug"),)] == 1.0


def test_gpus_per_health_state_every_state_present(steward: Steward) -> None:
    m = StewardMetrics()
    health = {"GPU-0": Health.FAILED, "GPU-1": Health.OK, "GPU-2": Health.OK, "GPU-3": Health.DEGRADING}
    m.record(steward, _report(health=health), 0.01)
    want = {"ok": 2.0, "throttled": 0.0, "degrading": 1.0, "failed": 1.0}
    assert _series(m, "gpusteward_gpu_health") == {(("state", k),): v for k, v in want.items()}
    m.record(steward, _report(health={"GPU-0": Health.OK}), 0.01)  # repaired: failed back to 0
    want = {"ok": 1.0, "throttled": 0.0, "degrading": 0.0, "failed": 0.0}
    assert _series(m, "gpusteward_gpu_health") == {(("state", k),): v for k, v in want.items()}
