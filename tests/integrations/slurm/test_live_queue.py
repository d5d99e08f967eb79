"""The queue against the real test controller: more GPU jobs than the node's four GPUs."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from gpusteward.domain.integration import BuildContext
from gpusteward.domain.ports import SystemClock
from gpusteward.integrations.slurm import SlurmClient, SlurmRunner, SlurmSourceSettings
from gpusteward.integrations.slurm.build import build
from gpusteward.integrations.slurm.queue import SlurmQueue


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_pending_jobs_beyond_the_gres_and_their_queue_time(slurm, cleanup_jobs, fmt) -> None:
    big = slurm.sbatch("sleep 600\n", "--gres=gpu:3", "--job-name=big")
    cleanup_jobs.append(big)
    slurm.wait(big, {"RUNNING"})
    two = slurm.sbatch("sleep 600\n", "--gres=gpu:2", "--job-name=two")
    cpu = slurm.sbatch("sleep 600\n", "--job-name=cpu-only", "--partition=gpu")
    dep = slurm.sbatch("sleep 600\n", "--gres=gpu:1", f"--dependency=afterok:{big}", "--job-name=dep")
    cleanup_jobs += [two, cpu, dep]
    slurm.wait(two, {"PENDING"})

    client = SlurmClient(SlurmRunner(slurm_conf=slurm.conf, timeout_s=20), format=fmt)
    read = SlurmQueue(client, lookback_s=3600)
    # The scheduler gives a reason once it has looked at the job: read until it has.
    queue = read(datetime.now(UTC))
    for _ in range(50):
        if any(p.id == two and p.reason == "Resources" for p in queue.pending):
            break
        time.sleep(0.2)
        queue = read(datetime.now(UTC))
    pending = {p.id: p for p in queue.pending}
    assert set(pending) == {two, dep}  # the CPU job runs beside, or waits for no GPU
    assert (pending[two].reason, pending[two].gpus, pending[two].queue) == ("Resources", 2, "debug")
    assert pending[dep].reason == "Dependency"
    assert queue.gpus_waited_for() == 2
    # No accounting on the test cluster: auto gave sacct up and took the running jobs' starts.
    assert read.starts_from == "squeue"
    started = {w.id: w for w in queue.started}
    assert big in started
    assert started[big].gpus == 3
    assert 0 <= started[big].waited_s < 60

    # The big job ends; the waiting one starts, and its wait is a queue time.
    slurm.run("scancel", big)
    slurm.wait(two, {"RUNNING"})
    queue = read(datetime.now(UTC))
    assert two not in {p.id for p in queue.pending}
    started = {w.id: w for w in queue.started}
    assert started[two].waited_s >= 1.0  # it waited at least while the test read the queue
    assert started[two].queue == "debug"


def test_build_wires_the_queue(slurm, metrics) -> None:
    cfg = SlurmSourceSettings(slurm_conf=slurm.conf)
    integration = build(cfg, BuildContext(clock=SystemClock(), metrics=metrics))
    assert integration.queue is not None
    now = datetime.now(UTC)
    queue = integration.queue(now)
    assert queue.at == now
    assert all(p.source == "slurm" for p in queue.pending)
    off = build(
        SlurmSourceSettings(slurm_conf=slurm.conf, queue={"enabled": False}),
        BuildContext(clock=SystemClock(), metrics=metrics),
    )
    assert off.queue is None
