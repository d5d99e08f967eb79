"""Acting on Slurm jobs: checkpoint signal, grace, ``scancel``; force by ``scancel --full`` or requeue.

L2 (graceful stop): ``scancel --signal=<SIG> --full <job>`` (the batch script and every step
get it; USR1 by default, per partition or account if configured), then wait up to the grace
for the job to end by itself, re-reading its state every few seconds, then ``scancel <job>``
(Slurm's own SIGTERM → KillWait → SIGKILL). The runner uses L2 in two phases
(``StagedExecutor``): ``begin`` sends the checkpoint signal and returns at once, its follow-up
due after the grace; ``complete`` then cancels the job if it still runs, so no tick waits out a
grace (``execute`` does both in one blocking call). L3 (force): ``scancel --full <job>``, or
``scontrol requeue <job>`` for a requeueable job when so configured.

Nothing is done to a job whose state cannot be read now: that is an ``ExecutionError`` (the
runner records it and retries later), never a guess. The Slurm side is injected as a
``SlurmControl``, so this module runs no command itself and imports no sensing code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from gpusteward.domain.errors import ExecutionError, SourceError
from gpusteward.domain.models import Decision, Level, Outcome, Workload
from gpusteward.domain.ports import Clock, SystemClock

log = logging.getLogger(__name__)


class SlurmControl(Protocol):
    """Slurm as the executor needs it. Methods raise ``SourceError`` when Slurm cannot be reached;
    the control methods return False when the job is already gone."""

    def fresh(self, workload: Workload) -> Workload | None:
        """The job behind ``workload``, read now; None when it no longer runs."""
        ...

    def signal(self, job_id: str, signal: str, *, full: bool = True) -> bool: ...

    def cancel(self, job_id: str, *, full: bool = False) -> bool: ...

    def requeue(self, job_id: str) -> bool: ...


class SlurmExecutor:
    """Implements ``Executor`` for workloads of the Slurm source named ``source``."""

    def __init__(
        self,
        control: SlurmControl,
        *,
        source: str = "slurm",
        checkpoint_signal: str = "USR1",
        signal_by_account: Mapping[str, str] | None = None,
        signal_by_partition: Mapping[str, str] | None = None,
        grace_s: float = 120.0,
        poll_s: float = 2.0,
        force: Literal["cancel", "requeue"] = "cancel",
        clock: Clock | None = None,
    ) -> None:
        self.name = source
        self.control = control
        self.checkpoint_signal = checkpoint_signal
        self.signal_by_account = dict(signal_by_account or {})
        self.signal_by_partition = dict(signal_by_partition or {})
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.force = force
        # The grace is real time even when the agent runs on a simulated clock: Slurm does not.
        self.clock = clock or SystemClock()

    def supports(self, workload: Workload, level: Level) -> bool:
        return (
            level in (Level.GRACEFUL_STOP, Level.FORCE)
            and workload.source == self.name
            and bool(workload.ref.get("job_id"))
        )

    def signal_for(self, workload: Workload) -> str:
        """The checkpoint signal: the partition's, else the account's, else the default."""
        ref = workload.ref
        return (
            self.signal_by_partition.get(ref.get("partition", ""))
            or self.signal_by_account.get(ref.get("account", ""))
            or self.checkpoint_signal
        )

    def _read(self, workload: Workload) -> Workload | None:
        """The same incarnation of the job, now; None when it has ended (or was requeued)."""
        try:
            now = self.control.fresh(workload)
        except SourceError as e:
            raise ExecutionError(
                f"cannot read job {workload.ref.get('job_id')} now, nothing done: {e}"
            ) from e
        if now is None or now.incarnation != workload.incarnation:
            return None
        return now

    def current(self, workload: Workload) -> Workload | None:
        return self._read(workload)

    def _call(self, what: str, fn: Callable[..., bool], *args: Any, **kw: Any) -> bool:
        try:
            return fn(*args, **kw)
        except SourceError as e:
            raise ExecutionError(f"{what} failed: {e}") from e

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        job = workload.ref.get("job_id", "")
        if decision.level not in (Level.GRACEFUL_STOP, Level.FORCE):
            raise ExecutionError(f"{decision.level.label} is not something the Slurm executor does")
        if self._read(workload) is None:
            return Outcome(
                True, f"job {job} already ended", verified=True, released_gpu_uuids=workload.gpu_uuids
            )
        if decision.level is Level.FORCE:
            return self._force(workload, job)
        return self._graceful(workload, job)

    def begin(self, decision: Decision, workload: Workload) -> Outcome:
        """L2, first phase: the checkpoint signal; the follow-up is due after the grace."""
        job = workload.ref.get("job_id", "")
        if decision.level is not Level.GRACEFUL_STOP:
            raise ExecutionError(f"{decision.level.label} is not begun in two phases by the Slurm executor")
        if self._read(workload) is None:
            return self._ended(workload, f"job {job} already ended")
        sig = self.signal_for(workload)
        if not self._call(f"scancel --signal={sig} --full {job}", self.control.signal, job, sig, full=True):
            return self._ended(workload, f"job {job} ended before SIG{sig}")
        detail = f"sent SIG{sig} to job {job} (batch script and steps); scancel after {self.grace_s:g} s"
        return Outcome(True, detail, follow_up_after_s=self.grace_s)

    def checkpoint_now(self, decision: Decision, workload: Workload) -> Outcome:
        """A spot interruption: ``scancel --signal=<SIG> --full`` alone (batch script and steps)."""
        job = workload.ref.get("job_id", "")
        if self._read(workload) is None:
            return self._ended(workload, f"job {job} already ended")
        sig = self.signal_for(workload)
        if not self._call(f"scancel --signal={sig} --full {job}", self.control.signal, job, sig, full=True):
            return self._ended(workload, f"job {job} ended before SIG{sig}")
        return Outcome(True, f"sent SIG{sig} to job {job} (batch script and steps)", verified=True)

    def requeue_now(self, decision: Decision, workload: Workload) -> Outcome:
        """A spot interruption near its deadline: ``scontrol requeue`` (the job runs again elsewhere)."""
        job = workload.ref.get("job_id", "")
        if self._read(workload) is None:
            return self._ended(workload, f"job {job} already ended")
        self._call(f"scontrol requeue {job}", self.control.requeue, job)
        gone = self._read(workload) is None
        return Outcome(True, f"requeued job {job} (scontrol requeue)", verified=gone)

    def complete(self, decision: Decision, workload: Workload) -> Outcome:
        """L2, second phase (the grace is over): ``scancel`` the job if it still runs, verify."""
        job = workload.ref.get("job_id", "")
        if self._read(workload) is None:
            return self._ended(workload, f"job {job} ended within the grace")
        self._call(f"scancel {job}", self.control.cancel, job, full=False)
        gone = self._read(workload) is None
        return Outcome(
            True,
            f"job {job} still running after the grace: scancel (SIGTERM, then SIGKILL after KillWait)",
            verified=gone,
            released_gpu_uuids=workload.gpu_uuids if gone else (),
        )

    @staticmethod
    def _ended(workload: Workload, detail: str) -> Outcome:
        return Outcome(True, detail, verified=True, released_gpu_uuids=workload.gpu_uuids)

    def _graceful(self, workload: Workload, job: str) -> Outcome:
        sig = self.signal_for(workload)
        if not self._call(f"scancel --signal={sig} --full {job}", self.control.signal, job, sig, full=True):
            return Outcome(
                True, f"job {job} ended before SIG{sig}", verified=True, released_gpu_uuids=workload.gpu_uuids
            )
        started = self.clock.monotonic()
        while (waited := self.clock.monotonic() - started) < self.grace_s:
            self.clock.sleep(min(self.poll_s, self.grace_s - waited))
            if self._read(workload) is None:
                waited = self.clock.monotonic() - started
                return Outcome(
                    True,
                    f"sent SIG{sig} to job {job} (batch script and steps); it ended {waited:.1f} s later",
                    verified=True,
                    released_gpu_uuids=workload.gpu_uuids,
                )
        self._call(f"scancel {job}", self.control.cancel, job, full=False)
        gone = self._read(workload) is None
        return Outcome(
            True,
            f"sent SIG{sig} to job {job}; still running after {self.grace_s:g} s: scancel "
            "(SIGTERM, then SIGKILL after KillWait)",
            verified=gone,
            released_gpu_uuids=workload.gpu_uuids if gone else (),
        )

    def _force(self, workload: Workload, job: str) -> Outcome:
        if self.force == "requeue" and workload.ref.get("requeue") == "true":
            self._call(f"scontrol requeue {job}", self.control.requeue, job)
            detail = f"requeued job {job} (scontrol requeue): its GPUs are freed and it runs again later"
        else:
            self._call(f"scancel --full {job}", self.control.cancel, job, full=True)
            detail = f"cancelled job {job} (scancel --full)"
        gone = self._read(workload) is None
        return Outcome(True, detail, verified=gone, released_gpu_uuids=workload.gpu_uuids if gone else ())

    def verify(self, decision: Decision, workload: Workload) -> bool:
        """The job (this incarnation) no longer runs. Unreadable state is not verified."""
        try:
            return self._read(workload) is None
        except ExecutionError as e:
            log.warning("verify %s: %s", decision.idempotency_key, e)
            return False
