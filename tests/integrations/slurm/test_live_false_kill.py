"""The live false-kill figure against a real Slurm controller: a job gpusteward stopped and its
owner resubmitted with the same name, user and account within the horizon is a suspected false
kill; a different job started at the same time is not."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.integrations.slurm.test_live_steward import CHECKPOINTING, SLEEPER

from gpusteward.domain.integration import Integration
from gpusteward.domain.models import ActionStatus
from gpusteward.integrations.sim import SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.runtime.registry import REGISTRY
from gpusteward.runtime.rollout import RolloutBook

#: Flags an idle GPU at once, so the whole ladder fits in a few seconds of agent time.
RULES = """\
rules:
  - name: idle-now
    kind: idle
    action: reclaim
    when: last(gpu_util_pct) < 5
    classes: [batch]
"""
TICK_S = 1.0


@pytest.fixture
def wired(metrics, monkeypatch):
    """The test's metric source, registered by name so the wiring builds the slurm source itself."""
    monkeypatch.setitem(REGISTRY, "testmetrics", lambda cfg, ctx: Integration(name="metrics", source=metrics))
    return metrics


def settings(tmp_path: Path, slurm) -> Settings:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    return load_settings(
        None,
        mode="enforce",
        tick_seconds=60,
        store={"url": f"sqlite:///{tmp_path / 'state.db'}"},
        source={
            "name": "slurm",
            "slurm": {
                "metrics": "testmetrics",
                "slurm_conf": str(slurm.conf),
                "command_timeout_seconds": 20,
                "grace_poll_seconds": 0.2,
            },
        },
        rules={"use_default_pack": False, "files": [str(rules)]},
        policy={
            "ladder": {
                "warn_again_after_minutes": 0,
                "graceful_stop_after_minutes": 0,
                "stop_grace_seconds": 1,
            },
            "startup_grace_minutes": 0,
            "budget": {"max_gpu_share_per_hour": 1.0},
        },
    )


def test_a_resubmitted_job_is_a_suspected_false_kill(slurm, tmp_path: Path, wired, cleanup_jobs):
    flag = tmp_path / "a.checkpointed"
    a = slurm.sbatch(CHECKPOINTING.format(flag=flag), "--gres=gpu:1", "--job-name=fk-train", "--time=120")
    cleanup_jobs.append(a)
    slurm.wait(a, {"RUNNING"})
    # Slurm's start times are the wall clock's: the agent's clock starts there and moves a second
    # a tick, so it stays close to it and the resubmission starts after the stop it recorded.
    clock = SimClock(datetime.now(tz=UTC))
    notifier = MemoryNotifier()
    cfg = settings(tmp_path, slurm)
    steward, _ = build_steward(cfg, clock=clock, notifier=notifier)
    book = RolloutBook(steward.store, cfg.policy)
    wid = f"slurm:gst:{a}"

    def stopped() -> bool:
        executing = [x for x in steward.store.actions(limit=50) if x.status is ActionStatus.EXECUTING]
        return slurm.state(a) != "RUNNING" and not executing

    def tick(done, limit: int) -> None:
        for _ in range(limit):
            steward.tick()
            clock.advance(TICK_S)
            if done():
                return

    tick(stopped, 30)
    assert slurm.wait(a, {"COMPLETED", "CANCELLED", "FAILED", "GONE", "TIMEOUT"}) == "COMPLETED"
    assert flag.exists()
    assert [s.workload_id for s in book.watch().stops] == [wid]
    assert book.false_kills() == []
    stop_at = book.watch().stops[0].at
    lead = (stop_at - datetime.now(tz=UTC)).total_seconds()
    assert lead < 20, f"the agent's clock ran {lead:.0f} s ahead of Slurm's"
    time.sleep(max(0.0, lead) + 1.1)  # Slurm keeps whole seconds

    # The owner resubmits the same job; someone else starts another one.
    again = slurm.sbatch(CHECKPOINTING.format(flag=flag), "--gres=gpu:1", "--job-name=fk-train")
    other = slurm.sbatch(SLEEPER, "--gres=gpu:1", "--job-name=fk-other")
    cleanup_jobs += [again, other]
    for job in (again, other):
        slurm.wait(job, {"RUNNING"})
    for i in slurm.gpu_indices(again) + slurm.gpu_indices(other):
        wired.util[i] = 90.0  # busy: the new jobs are not themselves stopped

    tick(lambda: bool(book.false_kills()), 3)

    [fk] = book.false_kills()
    assert fk.workload_id == wid
    assert fk.status == "suspected"
    assert fk.why.startswith(f"resubmitted as slurm:gst:{again} ")
    assert fk.scope == "default"
    # The admins were told, once, with the commands to settle it.
    told = [n for n in notifier.sent if n.owner is None and n.dedup_key == f"false-kill:{fk.id}"]
    assert len(told) == 1
    assert f"rollout false-kills confirm {fk.id}" in told[0].body
    # Later ticks do not count it again.
    tick(lambda: False, 2)
    assert [f.id for f in book.false_kills()] == [fk.id]
