"""The Slurm executor's logic over a fake Slurm (the real one is exercised in tests/integrations/slurm)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gpusteward.domain.errors import ExecutionError, SourceError
from gpusteward.domain.models import Decision, Level, Owner, Workload, WorkloadKind
from gpusteward.integrations.sim import SimClock
from gpusteward.integrations.slurm.executor import SlurmExecutor

START = datetime(2025, 1, 1, tzinfo=UTC)


def workload(**ref: str) -> Workload:
    base = {"job_id": "42", "partition": "gpu", "account": "physics", "requeue": "true"}
    return Workload(
        "slurm:c:42",
        WorkloadKind.JOB,
        "train",
        Owner("alice", "physics"),
        2,
        ("GPU-0", "GPU-1"),
        START,
        source="slurm",
        ref={**base, **ref},
    )


class FakeSlurm:
    """A job that ends ``ends_after`` seconds after the signal (None: never by itself), or on cancel."""

    def __init__(self, clock: SimClock, ends_after: float | None = None) -> None:
        self.clock = clock
        self.ends_after = ends_after
        self.calls: list[tuple] = []
        self.running = True
        self.restarted = False
        self.signalled_at: float | None = None
        self.unreadable = False
        self.fail_control = False

    def fresh(self, w: Workload) -> Workload | None:
        if self.unreadable:
            raise SourceError("squeue --json timed out after 30 s")
        signalled, ends = self.signalled_at, self.ends_after
        if signalled is not None and ends is not None and self.clock.monotonic() - signalled >= ends:
            self.running = False
        if self.restarted:
            return replace(w, started_at=START + timedelta(hours=1))
        return w if self.running else None

    def _do(self, *call) -> bool:
        if self.fail_control:
            raise SourceError("scancel exited 1: Access/permission denied")
        self.calls.append(call)
        return self.running

    def signal(self, job_id, signal, *, full=True):
        ok = self._do("signal", job_id, signal, full)
        self.signalled_at = self.clock.monotonic()
        return ok

    def cancel(self, job_id, *, full=False):
        ok = self._do("cancel", job_id, full)
        self.running = False
        return ok

    def requeue(self, job_id):
        ok = self._do("requeue", job_id)
        self.running = False
        return ok


def decision(level: Level) -> Decision:
    return Decision("slurm:c:42", START, level, "graceful-stop", "idle", gpu_uuids=("GPU-0", "GPU-1"))


def make(ends_after=None, **kw):
    clock = SimClock(START)
    slurm = FakeSlurm(clock, ends_after)
    ex = SlurmExecutor(slurm, grace_s=60, poll_s=2, clock=clock, **kw)
    return ex, slurm, clock


def test_graceful_stop_ends_within_the_grace():
    ex, slurm, clock = make(ends_after=5)
    out = ex.execute(decision(Level.GRACEFUL_STOP), workload())
    assert slurm.calls == [("signal", "42", "USR1", True)]
    assert out.ok
    assert out.verified
    assert out.released_gpu_uuids == ("GPU-0", "GPU-1")
    assert "SIGUSR1" in out.detail
    assert "ended 6.0 s later" in out.detail
    assert clock.monotonic() == 6


def test_graceful_stop_cancels_after_the_grace():
    ex, slurm, clock = make(ends_after=None)
    out = ex.execute(decision(Level.GRACEFUL_STOP), workload())
    assert slurm.calls == [("signal", "42", "USR1", True), ("cancel", "42", False)]
    assert clock.monotonic() == 60
    assert out.verified
    assert "still running after 60 s: scancel" in out.detail


@pytest.mark.parametrize(
    ("ref", "signal"),
    [
        ({}, "USR2"),  # partition gpu
        ({"partition": "cpu"}, "TERM"),  # account physics
        ({"partition": "cpu", "account": "bio"}, "USR1"),
    ],
)
def test_checkpoint_signal_by_partition_then_account(ref, signal):
    ex, slurm, _ = make(
        ends_after=0, signal_by_partition={"gpu": "USR2"}, signal_by_account={"physics": "TERM"}
    )
    ex.execute(decision(Level.GRACEFUL_STOP), workload(**ref))
    assert slurm.calls[0] == ("signal", "42", signal, True)


def test_force_cancels_or_requeues():
    ex, slurm, _ = make()
    out = ex.execute(decision(Level.FORCE), workload())
    assert slurm.calls == [("cancel", "42", True)]
    assert "scancel --full" in out.detail
    assert out.verified

    ex, slurm, _ = make(force="requeue")
    out = ex.execute(decision(Level.FORCE), workload())
    assert slurm.calls == [("requeue", "42")]
    assert "requeued" in out.detail

    ex, slurm, _ = make(force="requeue")
    ex.execute(decision(Level.FORCE), workload(requeue="false"))
    assert slurm.calls == [("cancel", "42", True)], "a job that refuses requeueing is cancelled"


def test_nothing_is_done_to_a_job_whose_state_cannot_be_read():
    ex, slurm, _ = make()
    slurm.unreadable = True
    for level in (Level.GRACEFUL_STOP, Level.FORCE):
        with pytest.raises(ExecutionError, match="cannot read job 42 now, nothing done"):
            ex.execute(decision(level), workload())
    with pytest.raises(ExecutionError):
        ex.current(workload())
    assert slurm.calls == []
    assert ex.verify(decision(Level.FORCE), workload()) is False


def test_unreadable_during_the_grace_means_no_cancel():
    ex, slurm, clock = make(ends_after=None)
    original = slurm.fresh
    reads = []

    def flaky(w):
        reads.append(clock.monotonic())
        if len(reads) > 2:
            raise SourceError("slurmctld down")
        return original(w)

    slurm.fresh = flaky
    with pytest.raises(ExecutionError, match="slurmctld down"):
        ex.execute(decision(Level.GRACEFUL_STOP), workload())
    assert [c[0] for c in slurm.calls] == ["signal"]


def test_gone_or_restarted_jobs_are_not_touched():
    ex, slurm, _ = make()
    slurm.running = False
    out = ex.execute(decision(Level.GRACEFUL_STOP), workload())
    assert out.ok
    assert out.verified
    assert "already ended" in out.detail
    ex, slurm, _ = make()
    slurm.restarted = True
    assert ex.current(workload()) is None, "a requeued job that runs again is another incarnation"
    out = ex.execute(decision(Level.FORCE), workload())
    assert "already ended" in out.detail
    assert slurm.calls == []


def test_control_failures_are_execution_errors():
    ex, slurm, _ = make()
    slurm.fail_control = True
    with pytest.raises(ExecutionError, match=r"scancel --signal=USR1 --full 42 failed: .*permission denied"):
        ex.execute(decision(Level.GRACEFUL_STOP), workload())


def test_supports_only_its_own_jobs_and_stops():
    ex, _, _ = make()
    w = workload()
    assert ex.supports(w, Level.GRACEFUL_STOP)
    assert ex.supports(w, Level.FORCE)
    assert not ex.supports(w, Level.NOTIFY)
    assert not ex.supports(w, Level.INFRA)
    assert not ex.supports(replace(w, source="kubernetes"), Level.FORCE)
    assert not ex.supports(replace(w, ref={}), Level.FORCE)
    with pytest.raises(ExecutionError, match="L1"):
        ex.execute(decision(Level.NOTIFY), w)


def test_begin_signals_and_returns_at_once_then_complete_cancels():
    ex, slurm, clock = make(ends_after=None)
    out = ex.begin(decision(Level.GRACEFUL_STOP), workload())
    assert slurm.calls == [("signal", "42", "USR1", True)]
    assert (out.ok, out.verified, out.follow_up_after_s) == (True, False, 60)
    assert clock.monotonic() == 0  # no wait for the grace
    out = ex.complete(decision(Level.GRACEFUL_STOP), workload())
    assert slurm.calls[1:] == [("cancel", "42", False)]
    assert out.verified
    assert "still running after the grace: scancel" in out.detail


def test_complete_does_not_cancel_a_job_that_ended_within_the_grace():
    ex, slurm, clock = make(ends_after=5)
    ex.begin(decision(Level.GRACEFUL_STOP), workload())
    clock.sleep(60)
    out = ex.complete(decision(Level.GRACEFUL_STOP), workload())
    assert slurm.calls == [("signal", "42", "USR1", True)]
    assert out.verified
    assert out.released_gpu_uuids == ("GPU-0", "GPU-1")
    assert "ended within the grace" in out.detail


def test_begin_on_an_ended_job_is_done_and_force_is_not_begun():
    ex, slurm, _ = make()
    slurm.running = False
    out = ex.begin(decision(Level.GRACEFUL_STOP), workload())
    assert (out.verified, out.follow_up_after_s, slurm.calls) == (True, None, [])
    with pytest.raises(ExecutionError):
        ex.begin(decision(Level.FORCE), workload())
