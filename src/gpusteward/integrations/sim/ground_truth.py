"""What the simulator knows and an agent never could: each workload's planned life, how it
ended, and the score of what the agent did. Mixed into ``SimCluster``; the demo and the tests
score against it."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpusteward.domain.models import Gpu
from gpusteward.integrations.sim.behaviours import Mode
from gpusteward.integrations.sim.health import HealthModel
from gpusteward.integrations.sim.runs import Run, ending_of, score_runs
from gpusteward.integrations.sim.truth import Ending, GpuFailure, Score, Truth


class GroundTruth:
    start: datetime
    gpus: tuple[Gpu, ...]
    health: HealthModel
    #: Every workload that has started, by id.
    _runs: dict[str, Run]
    #: Seconds since ``start`` the cluster has been advanced to.
    _t: float

    def _dt(self, s: float) -> datetime:
        return self.start + timedelta(seconds=s)

    def _offset(self, at: datetime) -> float:
        return (at - self.start).total_seconds()

    def time_at(self, offset_s: float) -> datetime:
        """The time ``offset_s`` seconds after the cluster's start."""
        return self._dt(offset_s)

    def offset_of(self, at: datetime) -> float:
        """Seconds from the cluster's start to ``at``."""
        return self._offset(at)

    def truth(self, workload_id: str) -> Truth:
        """Ground truth of a workload that has started (KeyError otherwise)."""
        return self._runs[workload_id].truth

    def truths(self) -> tuple[Truth, ...]:
        return tuple(r.truth for r in self._runs.values())

    def is_productive(self, workload_id: str, at: datetime) -> bool:
        """Whether it does useful work at ``at`` per its plan (False outside its planned life)."""
        run = self._runs[workload_id]
        return run.plan.productive_at(self._offset(at) - run.start_s)

    def phases(self, workload_id: str) -> tuple[tuple[datetime, datetime, Mode], ...]:
        """The planned schedule: (from, to, mode) segments."""
        run = self._runs[workload_id]
        return tuple(
            (self._dt(run.start_s + a), self._dt(run.start_s + b), m) for a, b, m in run.plan.phases()
        )

    def ending(self, workload_id: str) -> Ending | None:
        """How and when it ended; None while it runs."""
        return ending_of(self._runs[workload_id], self._dt)

    def endings(self) -> tuple[Ending, ...]:
        return tuple(e for run in self._runs.values() if (e := ending_of(run, self._dt)) is not None)

    def score(self, until: datetime | None = None) -> Score:
        """Waste, reclaimed GPU-hours and false stops over [start, until) (default: now)."""
        u = self._t if until is None else self._offset(until)
        return score_runs(self._runs.values(), u, self._dt)

    def failures(self, until: datetime | None = None) -> tuple[GpuFailure, ...]:
        """GPUs that failed by ``until`` (default: now), with the workload that hung on each."""
        u = self._t if until is None else self._offset(until)
        stuck = {
            i: r.workload.id
            for r in self._runs.values()
            if r.stuck_s is not None
            for i in r.gpu_idx
            if self.health.fail_s[i] == r.stuck_s
        }
        return tuple(
            GpuFailure(
                self.gpus[f.gpu].uuid,
                self.gpus[f.gpu].node,
                self._dt(f.degrade_s),
                f.precursor_xid,
                self._dt(f.precursor_s),
                f.xid,
                self._dt(f.fail_s),
                stuck.get(f.gpu),
            )
            for f in self.health.faults
            if f.fail_s <= u
        )

    def stuck_at(self, workload_id: str) -> datetime | None:
        """When it hung on a failed GPU (None: it never did, or not yet)."""
        run = self._runs[workload_id]
        return None if run.stuck_s is None or run.stuck_s > self._t else self._dt(run.stuck_s)
