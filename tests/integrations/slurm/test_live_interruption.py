"""A spot interruption on the one-node Slurm cluster: the emulated metadata service marks the
node's instance, the running job gets its checkpoint signal (scancel --signal=USR1 --full) at
once, and in enforce it is requeued (scontrol requeue) shortly before the deadline."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpusteward.domain.integration import Integration
from gpusteward.domain.models import ActionStatus
from gpusteward.integrations.cloud.interruption.build import build_watch
from gpusteward.integrations.cloud.interruption.emulator import MetadataEmulator
from gpusteward.integrations.sim import SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.registry import REGISTRY, build_integration

from .test_live_steward import settings_for

#: Writes one line per checkpoint signal and goes on (the instance, not the job, ends it).
TRAINER = """\
trap 'echo "checkpointed at $(date +%s)" >> {flag}' USR1
while true; do sleep 1; done
"""


@pytest.fixture
def wired(metrics, monkeypatch):
    """The test's metric source, registered by name so the wiring builds the slurm source itself."""
    monkeypatch.setitem(REGISTRY, "testmetrics", lambda cfg, ctx: Integration(name="metrics", source=metrics))
    return metrics


@pytest.fixture
def md() -> Iterator[MetadataEmulator]:
    with MetadataEmulator() as server:
        yield server


def _lines(flag: Path) -> list[str]:
    for _ in range(100):  # bash runs the trap after the current sleep; hang guard only
        if flag.exists():
            break
        time.sleep(0.1)
    return flag.read_text().splitlines() if flag.exists() else []


@pytest.mark.parametrize("mode", ["dry-run", "enforce"])
def test_the_job_is_signalled_at_once_and_requeued_in_enforce(
    slurm, tmp_path: Path, wired, cleanup_jobs, md: MetadataEmulator, mode: str
) -> None:
    flag = tmp_path / f"{mode}.ckpt"
    job = slurm.sbatch(TRAINER.format(flag=flag), "--gres=gpu:1", "--job-name=spot-train", "--requeue")
    cleanup_jobs.append(job)
    slurm.wait(job, {"RUNNING"})
    for i in slurm.gpu_indices(job):
        wired.util[i] = 95.0  # busy: no ladder of its own
    settings = settings_for(tmp_path, slurm, mode=mode)
    settings = settings.model_copy(
        update={
            "cloud": settings.cloud.model_validate(
                {"provider": "aws", "interruption": {"metadata_url": md.url, "poll_seconds": 0.001}}
            )
        }
    )
    clock = SimClock(datetime.now(tz=UTC))
    integration = build_integration(settings, clock)
    assert integration.interruptions is None  # a cluster-wide agent does not ask its own host's IMDS
    integration.interruptions = build_watch(settings.cloud, clock, node=slurm.node)  # an agent on the node
    steward, _ = build_steward(settings, clock=clock, notifier=MemoryNotifier(), integration=integration)
    deadline = datetime.now(tz=UTC).replace(microsecond=0) + timedelta(minutes=2)
    md.state.aws_action = {"action": "terminate", "time": deadline.strftime("%Y-%m-%dT%H:%M:%SZ")}

    steward.tick()
    [line] = _lines(flag)
    assert int(line.split()[-1]) <= deadline.timestamp()
    assert slurm.state(job) == "RUNNING"  # signalled, not stopped
    wid = f"slurm:gst:{job}"
    [signalled] = steward.store.actions(workload_id=wid)
    assert signalled.step == "checkpoint-before-interruption"
    assert signalled.status is ActionStatus.SUCCEEDED
    assert "SIGUSR1" in signalled.detail

    clock.advance(95)  # within requeue_before_deadline_seconds (30) of the deadline
    try:
        steward.tick()
        node = slurm.run("scontrol", "--oneliner", "show", "node", slurm.node).stdout
    finally:
        slurm.run("scontrol", "update", f"NodeName={slurm.node}", "State=RESUME", check=False)
    steps = sorted((a.step, a.status) for a in steward.store.actions(workload_id=wid))
    if mode == "dry-run":
        assert steps == [("checkpoint-before-interruption", ActionStatus.SUCCEEDED)]
        assert slurm.state(job) == "RUNNING"
        assert "DRAIN" not in node
        return
    # The node was taken out of scheduling first, so the requeued job cannot land on it again.
    assert re.search(r"State=\S*DRAIN", node), node
    [drain] = [r for r in steward.store.audit_log(limit=100) if r.event == "interruption.drain"]
    assert "drained node" in str(drain.payload["detail"])
    assert steps == [
        ("checkpoint-before-interruption", ActionStatus.SUCCEEDED),
        ("requeue-before-interruption", ActionStatus.SUCCEEDED),
    ]
    restarts = re.search(r"Restarts=(\d+)", slurm.show(job))
    assert restarts is not None
    assert int(restarts.group(1)) == 1
    assert len(_lines(flag)) == 1  # one checkpoint signal, then the requeue
