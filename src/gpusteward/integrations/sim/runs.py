"""The cluster's book-keeping about each started workload, and scoring against the truth."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from gpusteward.domain.models import Workload
from gpusteward.integrations.sim.behaviours import Plan
from gpusteward.integrations.sim.scenarios import Arrival
from gpusteward.integrations.sim.truth import EndHow, Ending, Score, Truth

ToDatetime = Callable[[float], datetime]


class Run:
    """One started workload: mutable state, times in seconds since the cluster's start."""

    __slots__ = (
        "arrival",
        "ended_how",
        "ended_s",
        "exit_how",
        "exit_s",
        "gpu_idx",
        "killed",
        "plan",
        "start_s",
        "stop_s",
        "stuck_s",
        "terminate_s",
        "truth",
        "workload",
    )

    def __init__(
        self, arrival: Arrival, start_s: float, gpu_idx: list[int], workload: Workload, truth: Truth
    ) -> None:
        self.arrival = arrival
        self.plan: Plan = arrival.plan
        self.start_s = start_s
        self.gpu_idx = gpu_idx
        self.workload = workload
        self.truth = truth
        #: When it will release its GPUs and how: its planned end until a stop brings it forward.
        self.exit_s = start_s + arrival.plan.run_s
        self.exit_how = EndHow.FINISHED
        #: A SIGTERM due when a graceful stop's grace runs out.
        self.terminate_s: float | None = None
        #: The first stop action that reached it.
        self.stop_s: float | None = None
        self.killed = False
        #: When a GPU it holds fails and it hangs (None: never), set by the cluster.
        self.stuck_s: float | None = None
        self.ended_s: float | None = None
        self.ended_how: EndHow | None = None

    def next_s(self) -> float:
        """Time of the next thing due to happen to it."""
        return self.exit_s if self.terminate_s is None else min(self.exit_s, self.terminate_s)


def ending_of(run: Run, to_dt: ToDatetime) -> Ending | None:
    if run.ended_s is None or run.ended_how is None:
        return None
    stop_at = None if run.stop_s is None else to_dt(run.stop_s)
    productive = None if run.stop_s is None else run.plan.productive_at(run.stop_s - run.start_s)
    return Ending(run.workload.id, run.ended_how, to_dt(run.ended_s), stop_at, productive)


def score_runs(runs: Iterable[Run], until_s: float, to_dt: ToDatetime) -> Score:
    """Score over [0, until_s): waste there would have been, and what the stops did to it."""
    stopped: list[str] = []
    false: list[str] = []
    protected: list[str] = []
    waste = reclaimed = lost = 0.0
    for run in runs:
        plan, gpus = run.plan, len(run.gpu_idx)
        end = min(run.start_s + plan.run_s, until_s)
        if run.ended_how is EndHow.INTERRUPTED and run.ended_s is not None:
            end = min(end, run.ended_s)  # its node was taken: what is left is its resubmission's
        if plan.wasteful_from_s is not None:
            waste += gpus * max(0.0, end - max(run.start_s + plan.wasteful_from_s, 0.0))
        stopped_by_action = run.ended_how not in (None, EndHow.FINISHED)
        if not stopped_by_action or run.ended_s is None or run.stop_s is None or run.stop_s > until_s:
            continue
        wid = run.workload.id
        stopped.append(wid)
        # The GPU time freed: from release to when it would have ended by itself.
        gained = gpus * max(0.0, end - max(run.ended_s, 0.0))
        if run.truth.protected:
            protected.append(wid)
        if plan.productive_at(run.stop_s - run.start_s):
            false.append(wid)
            lost += gained
        else:
            reclaimed += gained
    return Score(
        until=to_dt(until_s),
        stopped=tuple(stopped),
        false_stops=tuple(false),
        protected_stops=tuple(protected),
        waste_gpu_hours=waste / 3600.0,
        reclaimed_gpu_hours=reclaimed / 3600.0,
        lost_gpu_hours=lost / 3600.0,
    )
