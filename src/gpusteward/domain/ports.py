"""Protocols for every outside system. Each has a fake in the package (the simulator)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from gpusteward.domain.models import Decision, Level, Notice, Observation, Outcome, Workload


@runtime_checkable
class Clock(Protocol):
    """Wall-clock and monotonic time, injected so a simulated day runs in seconds."""

    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(tz=UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@runtime_checkable
class Source(Protocol):
    """Senses GPUs, their samples and the workloads holding them."""

    name: str

    def observe(self, now: datetime) -> Observation:
        """One observation. Raises ``SourceError`` when nothing could be observed."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Executor(Protocol):
    """Carries out decisions through a system's own API."""

    name: str

    def supports(self, workload: Workload, level: Level) -> bool: ...

    def current(self, workload: Workload) -> Workload | None:
        """The workload as the system sees it now (pre-flight), or None when it is gone."""
        ...

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        """Do it. Raise ``ExecutionError`` on failure; must be safe to call again."""
        ...

    def verify(self, decision: Decision, workload: Workload) -> bool:
        """Whether the effect of ``decision`` is visible now."""
        ...


@runtime_checkable
class StagedExecutor(Executor, Protocol):
    """An executor whose graceful stop (L2) runs in two phases, so that its grace never blocks a
    tick: ``begin`` sends the checkpoint signal and returns at once (``Outcome.follow_up_after_s``
    set); ``complete``, called on a tick once that time has passed, ends what is still running
    (SIGTERM, ``scancel``) and verifies. Both must be safe to call again."""

    def begin(self, decision: Decision, workload: Workload) -> Outcome: ...

    def complete(self, decision: Decision, workload: Workload) -> Outcome: ...


@runtime_checkable
class Notifier(Protocol):
    """Tells an owner (or admins) something."""

    def send(self, notice: Notice) -> None: ...


@runtime_checkable
class Leadership(Protocol):
    """Whether this replica may act. Two replicas may run; only the leader decides and acts,
    the other keeps its window warm and takes over (from the database's ladders) when the
    leader goes away. Implementations: a PostgreSQL advisory lock, a Kubernetes Lease."""

    name: str

    def acquire(self) -> bool:
        """Take or renew leadership without blocking; True while this replica leads."""
        ...

    def release(self) -> None:
        """Give leadership up (on shutdown), so the other replica takes over at once."""
        ...


@runtime_checkable
class PoolScaler(Protocol):
    """Sets how many replicas a scalable pool runs (an inference Deployment, a node group):
    what tidal scaling acts through."""

    name: str

    def replicas(self, pool: str) -> int | None:
        """The pool's desired replicas now, or None when this scaler does not know the pool."""
        ...

    def scale(self, pool: str, replicas: int, reason: str) -> Outcome:
        """Set the pool's replicas. Raise ``ExecutionError`` on failure; safe to call again."""
        ...
