"""gpusteward against a real Slurm controller: checkpoint-stop the idle job, spare the busy and the
protected ones, change nothing in dry-run, and act on nothing while the controller is down."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpusteward.domain.errors import SourceError
from gpusteward.domain.integration import Integration
from gpusteward.domain.models import Action, ActionStatus, Hold, Level
from gpusteward.integrations.sim import SimClock
from gpusteward.integrations.slurm.build import build_slurm
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.runtime.registry import REGISTRY, build_context

#: Traps the checkpoint signal, writes a file, exits: a trainer that checkpoints on USR1.
CHECKPOINTING = """\
trap 'echo "checkpointed at $(date +%s)" > {flag}; exit 0' USR1
while true; do sleep 1; done
"""
SLEEPER = "sleep 3600\n"
ENDED = {"COMPLETED", "CANCELLED", "FAILED", "GONE", "TIMEOUT"}


def settings_for(tmp_path: Path, slurm, mode: str = "enforce", **ladder: float) -> Settings:
    return load_settings(
        None,
        mode=mode,
        tick_seconds=60,
        store={"url": f"sqlite:///{tmp_path / 'state.db'}"},
        source={
            "name": "slurm",
            "slurm": {
                "metrics": "testmetrics",
                "slurm_conf": str(slurm.conf),
                "command_timeout_seconds": 20,
                "grace_poll_seconds": 0.2,
                "contact": {"domain": "example.org"},
            },
        },
        policy={
            "ladder": {
                "warn_again_after_minutes": 0,
                "graceful_stop_after_minutes": 1,
                "stop_grace_seconds": 20,
                **ladder,
            },
            "startup_grace_minutes": 0,
            "budget": {"max_gpu_share_per_hour": 1.0},
        },
    )


@pytest.fixture
def wired_metrics(metrics, monkeypatch):
    """The test's metric source, registered by name so the wiring builds the slurm source itself."""
    monkeypatch.setitem(REGISTRY, "testmetrics", lambda cfg, ctx: Integration(name="metrics", source=metrics))
    return metrics


def submit_abc(slurm, tmp_path: Path, jobs: list[str], metrics) -> tuple[str, str, str, Path]:
    """A: 2 idle GPUs, checkpoints on USR1. B: 1 busy GPU. C: 1 idle GPU, protected by comment."""
    flag = tmp_path / "a.checkpointed"
    a = slurm.sbatch(CHECKPOINTING.format(flag=flag), "--gres=gpu:2", "--job-name=idle-a", "--time=120")
    b = slurm.sbatch(SLEEPER, "--gres=gpu:1", "--job-name=busy-b")
    c = slurm.sbatch(SLEEPER, "--gres=gpu:1", "--job-name=kept-c", "--comment=gpusteward:protect")
    jobs += [a, b, c]
    for job in (a, b, c):
        slurm.wait(job, {"RUNNING"})
    for i in slurm.gpu_indices(b):
        metrics.util[i] = 95.0
    return a, b, c, flag


def ticks_until(steward, clock, done, limit: int = 45) -> list:
    reports = []
    for _ in range(limit):
        reports.append(steward.tick())
        clock.advance(60)
        if done():
            break
    return reports


def test_enforce_checkpoint_stops_the_idle_job_only(slurm, tmp_path, wired_metrics, cleanup_jobs):
    a, b, c, flag = submit_abc(slurm, tmp_path, cleanup_jobs, wired_metrics)
    a_gpus = sorted(f"GPU-test-gst-node1-{i}" for i in slurm.gpu_indices(a))
    clock = SimClock(datetime.now(tz=UTC))
    notifier = MemoryNotifier()
    steward, integration = build_steward(settings_for(tmp_path, slurm), clock=clock, notifier=notifier)
    assert integration.source.name == "slurm"

    def settled() -> bool:  # the job ended, and its graceful stop's follow-up has run
        pending = [x for x in steward.store.actions(limit=50) if x.status is ActionStatus.EXECUTING]
        return slurm.state(a) != "RUNNING" and not pending

    reports = ticks_until(steward, clock, settled)

    # Through COMPLETING (the epilog) to COMPLETED: waited for, the state is read between the two.
    assert slurm.wait(a, ENDED) == "COMPLETED", "the checkpoint trap exits 0: the job ended by itself"
    assert flag.read_text().startswith("checkpointed")
    assert slurm.state(b) == slurm.state(c) == "RUNNING"
    assert all(r.source_ok and not r.errors for r in reports), [r.errors for r in reports if r.errors]

    wid = {j: f"slurm:gst:{j}" for j in (a, b, c)}
    first = reports[0]
    assert first.workloads == 3
    assert first.gpus == 4
    actions = sorted(steward.store.actions(limit=50, workload_id=wid[a]), key=lambda x: x.id)
    assert [x.step for x in actions] == ["warn-1", "warn-2", "graceful-stop"]
    assert all(x.status is ActionStatus.SUCCEEDED and not x.dry_run for x in actions)
    assert "SIGUSR1" in actions[-1].detail
    assert "ended" in actions[-1].detail
    assert "verified" in actions[-1].detail
    events = [r.event for r in steward.store.audit_log(limit=50, workload_id=wid[a])]
    assert events.count("action.start") == 3
    assert events.count("action.succeeded") == 3
    # B was busy: never a finding. C was idle but protected: its owner is told (protection stops
    # actions, not information), every stop is held, and nothing is done to the job.
    assert steward.store.actions(workload_id=wid[b]) == []
    assert steward.store.decisions_for(wid[b]) == []
    told = steward.store.actions(workload_id=wid[c])
    assert told
    assert all(x.level is Level.NOTIFY for x in told)
    held = steward.store.decisions_for(wid[c])
    assert any(d.level >= Level.GRACEFUL_STOP for d in held)
    assert all(d.hold is Hold.PROTECTED for d in held if d.level >= Level.GRACEFUL_STOP)
    # The owner heard about it at every step, at the address the contact rule gives.
    to_a = [n for n in notifier.sent if n.workload_id == wid[a]]
    assert len(to_a) == 3
    assert {n.owner.contact for n in to_a} == {"root@example.org"}
    # Per-GPU attribution: A's workload held exactly the GPUs Slurm gave it.
    info = steward.store.workload_info(wid[a])
    assert info is not None
    assert sorted(info.gpu_uuids) == a_gpus
    assert len(a_gpus) == 2


def test_dry_run_changes_nothing(slurm, tmp_path, wired_metrics, cleanup_jobs):
    a, b, c, flag = submit_abc(slurm, tmp_path, cleanup_jobs, wired_metrics)
    before = {j: slurm.show(j) for j in (a, b, c)}
    clock = SimClock(datetime.now(tz=UTC))
    steward, _ = build_steward(
        settings_for(tmp_path, slurm, mode="dry-run"), clock=clock, notifier=MemoryNotifier()
    )

    ticks_until(steward, clock, lambda: False, limit=45)

    assert not flag.exists()
    for job in (a, b, c):
        assert slurm.state(job) == "RUNNING"
        # Same job, same start, same allocation: nothing was signalled, requeued or cancelled.
        assert _stable(slurm.show(job)) == _stable(before[job])
    actions = steward.store.actions(limit=50)
    assert actions
    assert all(x.dry_run and x.status is ActionStatus.SKIPPED for x in actions)
    # The whole ladder was climbed on paper, up to the force stop.
    steps = [x.step for x in sorted(actions, key=lambda x: x.id) if x.workload_id == f"slurm:gst:{a}"]
    assert steps == ["warn-1", "warn-2", "graceful-stop", "force"]
    # The protected C is told (on paper too), never stopped; the busy B is not touched at all.
    assert {x.workload_id for x in actions} == {f"slurm:gst:{a}", f"slurm:gst:{c}"}
    assert all(x.level is Level.NOTIFY for x in actions if x.workload_id == f"slurm:gst:{c}")


def _stable(show: str) -> str:
    """scontrol's line without the fields that change by themselves (run time, load, priority)."""
    drop = ("RunTime=", "Priority=", "LastSchedEval=")
    return " ".join(t for t in show.split() if not t.startswith(drop))


def test_controller_down_no_action_then_recovers(slurm, tmp_path, metrics, cleanup_jobs):
    flag = tmp_path / "a.checkpointed"
    a = slurm.sbatch(CHECKPOINTING.format(flag=flag), "--gres=gpu:1", "--job-name=idle-down")
    cleanup_jobs.append(a)
    slurm.wait(a, {"RUNNING"})
    settings = settings_for(tmp_path, slurm)
    clock = SimClock(datetime.now(tz=UTC))
    parts = build_slurm(settings.source.slurm, build_context(settings, clock, metrics=metrics))
    integration = Integration(name="slurm", source=parts.source, executors=[parts.executor])
    steward, _ = build_steward(settings, clock=clock, notifier=MemoryNotifier(), integration=integration)
    wid = f"slurm:gst:{a}"

    def steps() -> list[str]:
        return [x.step for x in sorted(steward.store.actions(workload_id=wid), key=lambda x: x.id)]

    ticks_until(steward, clock, lambda: steps() == ["warn-1", "warn-2"])
    assert steps() == ["warn-1", "warn-2"]

    slurm.stop_controller()
    try:
        # Slurm 22.05's squeue --json exits 0 with an error entry and no jobs: an error, not "no jobs".
        with pytest.raises(SourceError, match="Failed while looking for jobs"):
            parts.client.jobs()
        parts.runner.timeout_s = 3
        outage = [steward.tick() for _ in range(2) if clock.advance(60) is None]
        assert all(not r.source_ok for r in outage)
        assert all(any("slurm: cannot read the job table" in e for e in r.errors) for r in outage)
        # The graceful stop came due during the outage: it was not carried out blind.
        done = [x for x in steward.store.actions(workload_id=wid) if x.step == "graceful-stop"]
        # (The loop may still decide on the workloads it last saw; the executor's fresh read fails.)
        assert all(x.status is ActionStatus.FAILED and "cannot read job" in x.detail for x in done)
        assert not flag.exists()
    finally:
        slurm.start_controller()
    parts.runner.timeout_s = 20
    assert slurm.state(a) == "RUNNING", "the job survived the controller restart untouched"

    ticks_until(steward, clock, lambda: slurm.state(a) != "RUNNING", limit=20)
    assert flag.exists()
    assert slurm.wait(a, ENDED) == "COMPLETED"  # through COMPLETING

    def stop() -> list[Action]:
        return [x for x in steward.store.actions(workload_id=wid) if x.step == "graceful-stop"]

    # The stop was begun (checkpoint signal) and completes on the first tick after its grace.
    ticks_until(steward, clock, lambda: stop()[0].status is not ActionStatus.EXECUTING, limit=20)
    assert len(stop()) == 1
    assert stop()[0].status is ActionStatus.SUCCEEDED
