"""The queue's model matching and GPUs-waited-for count (domain/queue.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpusteward.domain.queue import PendingJob, Queue, same_model

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("asked", "have", "serves"),
    [
        ("a100", "NVIDIA A100-SXM4-80GB", True),  # Slurm gres type vs NVML name
        ("NVIDIA-A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", True),  # Kubernetes product label
        ("h100", "NVIDIA A100-SXM4-80GB", False),
        ("", "NVIDIA H100 80GB HBM3", True),  # no model asked: any will do
        ("a100", "", False),  # a GPU of unknown model is not assumed to fit
        ("Tesla V100-SXM2-32GB", "v100", True),
    ],
)
def test_same_model(asked: str, have: str, serves: bool) -> None:
    assert same_model(asked, have) is serves


def test_gpus_waited_for_counts_only_jobs_held_back_by_gpus() -> None:
    def job(i: int, gpus: int, reason: str, model: str = "") -> PendingJob:
        return PendingJob(str(i), "gpu", gpus, AT, reason, gpu_model=model)

    q = Queue(
        AT,
        pending=(
            job(1, 2, "Resources", "a100"),
            job(2, 4, "Priority", "a100"),  # behind others, not behind GPUs
            job(3, 1, "Unschedulable"),  # any model
            job(4, 8, "Resources", "h100"),
        ),
    )
    assert q.gpus_waited_for() == 11
    assert q.gpus_waited_for("NVIDIA A100-SXM4-80GB") == 3
    assert q.gpus_waited_for("NVIDIA H100 80GB HBM3") == 9
    assert q.gpus_waited_for("NVIDIA L4") == 1
