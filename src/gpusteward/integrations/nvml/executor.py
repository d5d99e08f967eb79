"""Stopping local processes: checkpoint signal → SIGTERM (L2), SIGKILL (L3), then verify via NVML.

Guards, each refusing with ``PreflightFailed`` (recorded as a skipped action, never retried):
never PID 1, never the agent or one of its ancestors, never a PID that now belongs to
another process (its start time in clock ticks differs from the one the finding saw),
never root's processes unless allowed, never a protected user's. Signals go through a
pidfd opened *before* the identity check, so a PID reused between the check and the
signal cannot be hit: the pidfd still names the old, dead process.

L2 runs in two phases (``StagedExecutor``) so that the checkpoint's grace never blocks a tick:
``begin`` sends the checkpoint signal and returns at once, its follow-up due ``grace_s`` later;
``complete`` (on a later tick) sends SIGTERM if the process still runs and waits at most
``term_wait_s``. ``execute`` is both in one call (blocking for the grace), for direct use. L3
blocks for up to ``kill_wait_s``. Verification asks NVML which PIDs hold which GPUs: a stop is
verified when the process is gone and none of its GPUs lists it any more.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Protocol

from gpusteward.domain.errors import ExecutionError, PreflightFailed
from gpusteward.domain.models import Decision, Level, Outcome, Workload, WorkloadKind
from gpusteward.domain.ports import Clock, SystemClock

log = logging.getLogger(__name__)

CHECKPOINT_SIGNAL_KEY = "gpusteward.io/checkpoint-signal"
CHECKPOINT_ENV = "GPUSTEWARD_CHECKPOINT_SIGNAL"

#: PID → GPU (or MIG instance) UUIDs it holds now; None when that cannot be read.
Holdings = Callable[[], Mapping[int, tuple[str, ...]] | None]


class ProcessFacts(Protocol):
    """What the executor needs to know about a PID (``sensing.procfs.ProcInfo`` provides it)."""

    @property
    def pid(self) -> int: ...
    @property
    def uid(self) -> int | None: ...
    @property
    def user(self) -> str: ...
    @property
    def ppid(self) -> int: ...
    @property
    def start_ticks(self) -> int: ...
    @property
    def started_at(self) -> datetime: ...
    @property
    def exited(self) -> bool: ...
    @property
    def env(self) -> Mapping[str, str]: ...


class ProcessTable(Protocol):
    def read(self, pid: int) -> ProcessFacts | None: ...


def parse_signal(text: str) -> signal.Signals:
    """``SIGUSR1``, ``usr1`` or ``10`` → the signal; ``ValueError`` otherwise."""
    t = text.strip().upper()
    if t.isdigit():
        return signal.Signals(int(t))
    name = t if t.startswith("SIG") else f"SIG{t}"
    try:
        return signal.Signals[name]
    except KeyError:
        raise ValueError(f"unknown signal {text!r}") from None


class ProcessExecutor:
    """Implements ``gpusteward.domain.ports.Executor`` for the processes of one node."""

    name = "process"

    def __init__(
        self,
        *,
        node: str,
        procs: ProcessTable,
        holdings: Holdings,
        grace_s: float,
        term_wait_s: float = 10.0,
        kill_wait_s: float = 10.0,
        poll_s: float = 0.2,
        protected_users: Collection[str] = (),
        allow_root: bool = False,
        default_signal: str = "",
        clock: Clock | None = None,
        self_pid: int | None = None,
    ) -> None:
        self.node = node
        self.procs = procs
        self.holdings = holdings
        self.grace_s = grace_s
        self.term_wait_s = term_wait_s
        self.kill_wait_s = kill_wait_s
        self.poll_s = poll_s
        self.protected_users = frozenset(protected_users)
        self.allow_root = allow_root
        self.default_signal = default_signal
        self.clock = clock or SystemClock()
        self._own = self._lineage(os.getpid() if self_pid is None else self_pid)

    def _lineage(self, pid: int) -> frozenset[int]:
        """The agent and every process above it: stopping one of them stops the agent."""
        out = {pid, 1}
        for _ in range(64):
            info = self.procs.read(pid)
            if info is None or info.ppid <= 0 or info.ppid in out:
                break
            pid = info.ppid
            out.add(pid)
        return frozenset(out)

    @staticmethod
    def _ident(workload: Workload) -> tuple[int, int] | None:
        try:
            return int(workload.ref["pid"]), int(workload.ref["start_ticks"])
        except (KeyError, ValueError):
            return None

    def supports(self, workload: Workload, level: Level) -> bool:
        """L2 and L3 on this node's processes whose start time is known."""
        return (
            level in (Level.GRACEFUL_STOP, Level.FORCE)
            and workload.kind is WorkloadKind.PROCESS
            and workload.ref.get("node") == self.node
            and self._ident(workload) is not None
        )

    def current(self, workload: Workload) -> Workload | None:
        """The process as it is now: None when gone; another ``started_at`` when the PID was reused."""
        ident = self._ident(workload)
        if ident is None:
            return None
        info = self.procs.read(ident[0])
        if info is None or info.exited:
            return None
        if info.start_ticks != ident[1]:
            return replace(
                workload,
                started_at=info.started_at,
                ref={**workload.ref, "start_ticks": str(info.start_ticks)},
            )
        held = self.holdings()
        if held is None:
            raise PreflightFailed(
                "NVML cannot list the GPU processes now, so what it holds cannot be confirmed"
            )
        return replace(workload, gpu_uuids=held.get(ident[0], ()))

    def begin(self, decision: Decision, workload: Workload) -> Outcome:
        """L2, first phase: the checkpoint signal, then return; SIGTERM at once when there is none."""
        pid, start, info = self._target(decision, workload, Level.GRACEFUL_STOP)
        if info is None:
            return self._outcome(workload, f"{workload.id} already exited")
        ckpt = self._checkpoint_signal(workload, info)
        if ckpt is None:
            return self._terminate(workload, pid, start, f"SIGTERM sent to PID {pid} ({info.user})")
        self._send(pid, start, ckpt)
        detail = f"{ckpt.name} (checkpoint) sent to PID {pid} ({info.user}); SIGTERM after {self.grace_s:g}s"
        return Outcome(True, detail, follow_up_after_s=self.grace_s)

    def checkpoint_now(self, decision: Decision, workload: Workload) -> Outcome:
        """A spot interruption: the checkpoint signal alone, never SIGTERM (the instance is going
        away; what the owner's checkpoint saves is all that can be kept). Same guards as a stop."""
        pid, start, info = self._target(decision, workload, Level.GRACEFUL_STOP)
        if info is None:
            return Outcome(True, f"{workload.id} already exited", verified=True)
        ckpt = self._checkpoint_signal(workload, info)
        if ckpt is None:
            raise PreflightFailed(
                f"PID {pid} names no checkpoint signal ({CHECKPOINT_SIGNAL_KEY}, {CHECKPOINT_ENV})"
            )
        self._send(pid, start, ckpt)
        return Outcome(True, f"{ckpt.name} (checkpoint) sent to PID {pid} ({info.user})", verified=True)

    def complete(self, decision: Decision, workload: Workload) -> Outcome:
        """L2, second phase (the grace is over): SIGTERM if it still runs, a short wait, verify."""
        try:
            pid, start, info = self._target(decision, workload, Level.GRACEFUL_STOP)
        except PreflightFailed as e:
            if "reused" not in str(e):
                raise
            info = None  # the PID now belongs to another process: ours exited
        if info is None:
            return self._outcome(workload, f"{workload.id} exited within the grace")
        return self._terminate(workload, pid, start, f"SIGTERM sent to PID {pid} after the grace")

    def _target(
        self, decision: Decision, workload: Workload, *levels: Level
    ) -> tuple[int, int, ProcessFacts | None]:
        ident = self._ident(workload)
        if ident is None or decision.level not in levels:
            raise ExecutionError(
                f"{decision.level.label} on {workload.id} is not supported by the process executor"
            )
        pid, start = ident
        return pid, start, self._guard(workload, pid, start)

    def _terminate(self, workload: Workload, pid: int, start: int, detail: str) -> Outcome:
        self._send(pid, start, signal.SIGTERM)
        self._wait_until(lambda: self._gone(workload), self.term_wait_s)
        return self._outcome(workload, detail)

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        ident = self._ident(workload)
        if ident is None or decision.level not in (Level.GRACEFUL_STOP, Level.FORCE):
            raise ExecutionError(
                f"{decision.level.label} on {workload.id} is not supported by the process executor"
            )
        pid, start = ident
        info = self._guard(workload, pid, start)
        if info is None:
            return self._outcome(workload, f"{workload.id} already exited")
        if decision.level is Level.FORCE:
            self._send(pid, start, signal.SIGKILL)
            self._wait_until(lambda: self._gone(workload), self.kill_wait_s)
            return self._outcome(workload, f"SIGKILL sent to PID {pid} ({info.user})")
        steps = []
        ckpt = self._checkpoint_signal(workload, info)
        if ckpt is not None:
            self._send(pid, start, ckpt)
            steps.append(f"{ckpt.name} (checkpoint)")
            if self._wait_until(lambda: self._exited(pid, start), self.grace_s):
                return self._outcome(workload, f"{ckpt.name} sent to PID {pid}; it exited within the grace")
        self._send(pid, start, signal.SIGTERM)
        steps.append("SIGTERM" if ckpt is None else f"SIGTERM after {self.grace_s:g}s")
        self._wait_until(lambda: self._gone(workload), self.term_wait_s)
        return self._outcome(workload, f"{', then '.join(steps)} sent to PID {pid} ({info.user})")

    def verify(self, decision: Decision, workload: Workload) -> bool:
        """The process is gone and NVML no longer lists it on any of its GPUs."""
        return self._gone(workload)

    # --- guards and signals ----------------------------------------------------------------------

    def _guard(self, workload: Workload, pid: int, start: int) -> ProcessFacts | None:
        if pid <= 1:
            raise PreflightFailed(f"refused: PID {pid} is init (or invalid) and is never signalled")
        if pid in self._own:
            raise PreflightFailed(f"refused: PID {pid} is gpusteward itself or one of its parents")
        info = self.procs.read(pid)
        if info is None or info.exited:
            return None
        if info.start_ticks != start:
            raise PreflightFailed(
                f"refused: PID {pid} was reused (now started at tick {info.start_ticks}, the finding "
                f"saw tick {start})"
            )
        if info.uid == 0 and not self.allow_root:
            raise PreflightFailed(f"refused: PID {pid} belongs to root (set source.nvml.allow_root to allow)")
        if info.user in self.protected_users:
            raise PreflightFailed(f"refused: PID {pid} belongs to protected user {info.user}")
        return info

    def _checkpoint_signal(self, workload: Workload, info: ProcessFacts) -> signal.Signals | None:
        text = workload.tag(CHECKPOINT_SIGNAL_KEY) or info.env.get(CHECKPOINT_ENV) or self.default_signal
        if not text.strip():
            return None
        try:
            return parse_signal(text)
        except ValueError as e:
            # Stopping without the checkpoint the owner asked for could lose their work.
            raise ExecutionError(f"{workload.id}: checkpoint signal {text!r} is not a signal") from e

    def _send(self, pid: int, start: int, sig: signal.Signals) -> None:
        """Signal ``pid`` only if it is still the process that started at ``start``."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return  # gone already
        except OSError:
            fd = -1  # no pidfd (old kernel, seccomp): check, then kill, and accept the tiny race
        try:
            info = self.procs.read(pid)
            if info is None or info.exited:
                return
            if info.start_ticks != start:
                raise PreflightFailed(f"refused: PID {pid} was reused just before {sig.name}")
            if fd >= 0:
                signal.pidfd_send_signal(fd, sig)
            else:
                os.kill(pid, sig)
            log.info("sent %s to PID %d", sig.name, pid)
        except ProcessLookupError:
            return
        except PermissionError as e:
            raise ExecutionError(f"no permission to send {sig.name} to PID {pid}") from e
        finally:
            if fd >= 0:
                os.close(fd)

    # --- waiting and verifying -------------------------------------------------------------------

    def _exited(self, pid: int, start: int) -> bool:
        info = self.procs.read(pid)
        return info is None or info.exited or info.start_ticks != start

    def _released(self, workload: Workload) -> bool | None:
        ident = self._ident(workload)
        held = self.holdings()
        if held is None or ident is None:
            return None
        still = set(held.get(ident[0], ())) & set(workload.gpu_uuids)
        return not still

    def _gone(self, workload: Workload) -> bool:
        ident = self._ident(workload)
        return ident is not None and self._exited(*ident) and self._released(workload) is True

    def _wait_until(self, done: Callable[[], bool], seconds: float) -> bool:
        deadline = self.clock.monotonic() + seconds
        while True:
            if done():
                return True
            if self.clock.monotonic() >= deadline:
                return False
            self.clock.sleep(self.poll_s)

    def _outcome(self, workload: Workload, detail: str) -> Outcome:
        ident = self._ident(workload)
        exited = ident is not None and self._exited(*ident)
        released = self._released(workload)
        if not exited:
            detail += "; still running"
        elif released is None:
            detail += "; exited, GPU release not readable from NVML"
        elif not released:
            detail += "; exited, GPU memory not yet released"
        gone = exited and released is True
        return Outcome(True, detail, verified=gone, released_gpu_uuids=workload.gpu_uuids if gone else ())
