"""Nodes that come and go with their cloud instance, mixed into ``SimCluster``: a node whose
instance is stopped or was taken (a spot interruption) is down (nothing is placed there), and
things due at a set simulated time (``at``) happen in order with the cluster's own arrivals and
exits, however often it is observed.

Taking a node ends every workload on it. One that was still doing useful work is submitted again
at once, from where its progress was kept: the checkpoint it was asked for (``signal_checkpoint``)
if the signal came in time to be written, else its own last periodic checkpoint (a trainer's plan
has them), else its start. Work since that point is lost and counted.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from gpusteward.domain.models import Gpu
from gpusteward.integrations.sim.behaviours import CHECKPOINTS, Mode, Plan
from gpusteward.integrations.sim.runs import Run
from gpusteward.integrations.sim.scenarios import Arrival
from gpusteward.integrations.sim.truth import EndHow

#: A trainer asked to checkpoint writes it and exits this long after the signal.
CHECKPOINT_EXIT_S = 60.0


@dataclass(frozen=True, slots=True)
class Interrupted:
    """One workload that was on a node when its instance was taken."""

    workload_id: str
    gpus: int
    #: Its checkpoint signal came at least ``CHECKPOINT_EXIT_S`` before the node was taken.
    checkpointed: bool
    #: Whether it was submitted again (it was still doing useful work, and no stop was under way).
    resubmitted: bool
    #: GPU-hours of work done since the progress it resumes from (0 for work with no progress).
    lost_gpu_hours: float


def resume_plan(plan: Plan, from_s: float) -> Plan:
    """The rest of ``plan`` from ``from_s`` on, as a plan that starts there."""
    i = plan.segment(from_s)
    later = [k for k in range(i + 1, len(plan.starts_s)) if plan.starts_s[k] < plan.run_s]
    wasteful = plan.wasteful_from_s
    return replace(
        plan,
        starts_s=(0.0, *(plan.starts_s[k] - from_s for k in later)),
        modes=(plan.modes[i], *(plan.modes[k] for k in later)),
        run_s=plan.run_s - from_s,
        wasteful_from_s=None if wasteful is None else max(0.0, wasteful - from_s),
    )


def kept_progress_s(plan: Plan, offset_s: float) -> float:
    """Where a trainer taken at ``offset_s`` without a checkpoint of its own resumes: the end of
    its last checkpoint written by then (0: none yet)."""
    ends = (*plan.starts_s[1:], plan.run_s)
    done = [e for s, e, m in zip(plan.starts_s, ends, plan.modes, strict=True) if m is Mode.CHECKPOINT]
    return max((e for e in done if e <= offset_s), default=0.0)


class Capacity:
    """Down nodes, timed events and taken nodes; state is set up by ``_init_capacity``."""

    gpus: tuple[Gpu, ...]
    _running: list[Run]
    _queue: list[Arrival]
    _t: float

    def _init_capacity(self) -> None:
        #: Nodes whose instance is away (stopped, or taken and not yet replaced).
        self.down_nodes: set[str] = set()
        self._timers: list[tuple[float, int, Callable[[float], None]]] = []
        self._timer_seq = 0
        #: When each workload got its (first) checkpoint signal before an interruption.
        self._signalled: dict[str, float] = {}

    def _offset(self, at: datetime) -> float:
        raise NotImplementedError

    def _place(self, t: float) -> None:
        raise NotImplementedError

    def _schedule_exit(self, run: Run, t: float, how: EndHow) -> None:
        raise NotImplementedError

    def at(self, at_s: float, do: Callable[[float], None]) -> None:
        """Call ``do(t)`` when the cluster reaches ``at_s`` (seconds since its start); at once on
        the next advance when that time has passed."""
        heapq.heappush(self._timers, (max(at_s, self._t), self._timer_seq, do))
        self._timer_seq += 1

    def _next_timer_s(self) -> float:
        return self._timers[0][0] if self._timers else float("inf")

    def _fire_timer(self) -> None:
        t, _, do = heapq.heappop(self._timers)
        self._t = max(self._t, t)  # what it does (a node back, jobs placed) happens at t
        do(t)

    def node_down(self, node: str) -> None:
        self.down_nodes.add(node)

    def node_up(self, node: str) -> None:
        """The node is back; queued arrivals that fit start on it at once."""
        if node in self.down_nodes:
            self.down_nodes.discard(node)
            self._place(self._t)

    def runs_on(self, node: str) -> list[Run]:
        return [r for r in self._running if self.gpus[r.gpu_idx[0]].node == node]

    def signal_checkpoint(self, workload_id: str, at: datetime) -> bool:
        """Record an interruption's checkpoint signal at ``at``; False when it runs nowhere now."""
        if not any(r.workload.id == workload_id for r in self._running):
            return False
        self._signalled.setdefault(workload_id, max(self._offset(at), self._t))
        return True

    def signalled_at(self, workload_id: str) -> float | None:
        return self._signalled.get(workload_id)

    def take_node(self, node: str, t: float) -> list[Interrupted]:
        """The node's instance is gone at ``t``: its workloads end, the useful ones come back."""
        out = []
        for run in self.runs_on(node):
            run.terminate_s = None  # nothing of a stop under way happens any more
            self._schedule_exit(run, t, EndHow.INTERRUPTED)
            out.append(self._resubmit(run, t))
        self.node_down(node)
        return out

    def _resubmit(self, run: Run, t: float) -> Interrupted:
        plan, offset = run.plan, t - run.start_s
        signal = self._signalled.get(run.workload.id)
        checkpointed = signal is not None and signal + CHECKPOINT_EXIT_S <= t
        useful = run.stop_s is None and plan.productive_at(offset)
        gpus = len(run.gpu_idx)
        if not useful:
            return Interrupted(run.workload.id, gpus, checkpointed, False, 0.0)
        resume = offset
        if plan.behaviour in CHECKPOINTS:  # work with progress: it resumes from a checkpoint
            own = kept_progress_s(plan, offset)
            resume = max(own, signal - run.start_s) if checkpointed and signal is not None else own
        a = run.arrival
        self._queue.append(replace(a, at_s=t, plan=resume_plan(plan, resume), retry=a.retry + 1))
        lost = gpus * (offset - resume) / 3600.0
        return Interrupted(run.workload.id, gpus, checkpointed, True, lost)
