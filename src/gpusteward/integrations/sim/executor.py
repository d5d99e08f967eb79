"""Fake executor over the simulated cluster: graceful stop and force, with verification."""

from __future__ import annotations

from datetime import datetime

from gpusteward.domain.cloud import INTERRUPTION_CHECKPOINT_STEP
from gpusteward.domain.errors import ExecutionError, PreflightFailed
from gpusteward.domain.models import Decision, Level, Outcome, Workload
from gpusteward.domain.ports import Clock
from gpusteward.integrations.sim.cluster import SimCluster


class SimExecutor:
    """Implements ``gpusteward.domain.ports.Executor`` for workloads of a ``SimCluster``.

    L2 sends a checkpoint signal, then SIGTERM once ``grace_s`` has passed; L3 kills.
    An interruption's checkpoint (``checkpoint_now``, or step ``INTERRUPTION_CHECKPOINT_STEP``)
    only sends the signal and records when: the instance is taken at its deadline anyway, and
    what the workload keeps then is the cluster's to judge (``capacity.py``). There is no
    requeue: the simulated scheduler submits a taken node's useful work again by itself.
    Effects that lie in the future (a trainer's exit a minute after its checkpoint) show
    up when the cluster is advanced. With a ``clock``, ``verify`` first advances the
    cluster to the clock's time, so a caller that polls ``verify`` with ``clock.sleep``
    sees the workload go.
    """

    def __init__(
        self,
        cluster: SimCluster,
        name: str | None = None,
        *,
        grace_s: float = 90.0,
        fail_times: int = 0,
        clock: Clock | None = None,
    ) -> None:
        if name is not None and name != cluster.source_name:
            raise ValueError(f"executor name {name!r} differs from the cluster's {cluster.source_name!r}")
        self.cluster = cluster
        self.name = cluster.source_name
        self.grace_s = grace_s
        #: The next this many ``execute`` calls raise ExecutionError without acting.
        self.fail_times = fail_times
        self._clock = clock

    def _sim_id(self, workload: Workload) -> str | None:
        sim_id = workload.ref.get("sim_id")
        return sim_id if sim_id is not None and self.cluster.known(sim_id) else None

    def supports(self, workload: Workload, level: Level) -> bool:
        """L2 and L3 on this cluster's workloads; notices go through a Notifier, L4 is not simulated."""
        return level in (Level.GRACEFUL_STOP, Level.FORCE) and self._sim_id(workload) is not None

    def current(self, workload: Workload) -> Workload | None:
        """The workload as it is now; None when gone or when the id is another incarnation."""
        sim_id = self._sim_id(workload)
        now = None if sim_id is None else self.cluster.workload(sim_id)
        if now is None or now.started_at != workload.started_at:
            return None
        return now

    def _at(self, decision: Decision) -> datetime:
        if self._clock is not None:
            return self._clock.now()
        return max(decision.at, self.cluster.now)

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        """Stop ``workload``. A repeat on a workload already stopping (or gone) does nothing."""
        sim_id = self._sim_id(workload)
        if sim_id is None:
            raise ExecutionError(f"unknown workload {workload.id!r} on {self.name}")
        if decision.level not in (Level.GRACEFUL_STOP, Level.FORCE):
            raise ExecutionError(f"{decision.level.label} is not supported by the {self.name} executor")
        if self.fail_times > 0:
            self.fail_times -= 1
            raise ExecutionError(f"simulated failure stopping {workload.id}")
        if decision.step == INTERRUPTION_CHECKPOINT_STEP:
            return self.checkpoint_now(decision, workload)
        live = self.cluster.workload(sim_id)
        if live is None:
            return Outcome(True, f"{workload.id} already gone", verified=True)
        if live.started_at != workload.started_at:
            raise PreflightFailed(f"{workload.id} is now a different incarnation (started {live.started_at})")
        at = self._at(decision)
        if decision.level is Level.FORCE:
            if self.cluster.killed(sim_id):
                return Outcome(
                    True, f"{workload.id} already killed", verified=self.verify(decision, workload)
                )
            self.cluster.kill(sim_id, at)
            return self._outcome(decision, workload, f"killed {workload.id}")
        if self.cluster.stopping(sim_id):
            return Outcome(True, f"{workload.id} already stopping", verified=self.verify(decision, workload))
        self.cluster.graceful_stop(sim_id, at, self.grace_s)
        return self._outcome(
            decision, workload, f"checkpoint signal sent to {workload.id}; SIGTERM after {self.grace_s:g}s"
        )

    def checkpoint_now(self, decision: Decision, workload: Workload) -> Outcome:
        """The checkpoint signal alone, no stop after it (an interruption's step; the runtime's
        ``Checkpointer``): recorded with its time, for the cluster to judge at the take."""
        sim_id = self._sim_id(workload)
        if sim_id is None:
            raise ExecutionError(f"unknown workload {workload.id!r} on {self.name}")
        if not self.cluster.signal_checkpoint(sim_id, self._at(decision)):
            return Outcome(True, f"{workload.id} already gone", verified=True)
        return Outcome(
            True, f"checkpoint signal sent to {workload.id} before the interruption", verified=True
        )

    def _outcome(self, decision: Decision, workload: Workload, detail: str) -> Outcome:
        gone = self._gone(workload)
        released = workload.gpu_uuids if gone else ()
        return Outcome(True, detail, verified=gone, released_gpu_uuids=released)

    def _gone(self, workload: Workload) -> bool:
        sim_id = self._sim_id(workload)
        if sim_id is None:
            return True
        live = self.cluster.workload(sim_id)
        if live is not None and live.started_at == workload.started_at:
            return False
        return not any(self.cluster.holds(sim_id, u) for u in workload.gpu_uuids)

    def verify(self, decision: Decision, workload: Workload) -> bool:
        """The workload has exited and none of its GPUs is still held by it (an interruption's
        checkpoint: its signal was recorded)."""
        if decision.step == INTERRUPTION_CHECKPOINT_STEP:
            sim_id = self._sim_id(workload)
            return sim_id is None or self.cluster.signalled_at(sim_id) is not None
        if self._clock is not None:
            self.cluster.advance_to(self._clock.now())
        return self._gone(workload)
