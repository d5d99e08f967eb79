"""The replay source: a trace read forward in (simulated) time, and the executor that "stops" its workloads.

``ReplaySource.observe(now)`` returns the trace's samples taken since the previous observation,
each with its own time, and the workloads running at ``now``. ``ReplayExecutor`` stops a workload
by releasing it: from the action on, the source leaves its samples out and no longer lists it,
as if its GPUs had been freed. Each stop is recorded, so a backtest can judge it against what the
trace shows happened next.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

from gpusteward.domain.classes import CLASS_KEY
from gpusteward.domain.errors import ExecutionError
from gpusteward.domain.models import (
    Decision,
    Level,
    Observation,
    Outcome,
    Workload,
    WorkloadKind,
    utc,
)
from gpusteward.domain.sample_table import SampleTable
from gpusteward.integrations.replay.trace import Trace

#: ``Workload.ref`` key holding the workload's index in the trace.
REF_KEY = "trace_index"


class ReplaySource:
    """Implements ``gpusteward.domain.ports.Source`` over a ``Trace``.

    ``offset_s`` shifts the trace in time: a sample taken at trace time ``t`` is reported at
    ``t + offset_s``. The first observation reads back ``lookback_s`` (default: one interval).
    """

    def __init__(
        self,
        trace: Trace,
        *,
        name: str = "replay",
        offset_s: float = 0.0,
        lookback_s: float | None = None,
        default_class: str = "unknown",
    ) -> None:
        self.trace = trace
        self.default_class = default_class
        self.name = name
        self.offset_s = float(offset_s)
        self.lookback_s = trace.interval_s if lookback_s is None else float(lookback_s)
        #: Trace time of the last observation; None before the first.
        self.now_t: float | None = None
        #: Per trace workload, the trace time it was released (inf: never).
        self.released_at = np.full(len(trace.workloads), np.inf)
        self._gpus = trace.gpus
        self._uuids = [g.uuid for g in trace.gpus]
        self._workloads: dict[int, Workload] = {}

    def trace_time(self, at: datetime) -> float:
        return at.timestamp() - self.offset_s

    def index_of(self, workload: Workload) -> int | None:
        """The trace index of one of this source's workloads, else None."""
        raw = workload.ref.get(REF_KEY)
        if workload.source != self.name or raw is None or not raw.isdigit():
            return None
        i = int(raw)
        return i if i < len(self.trace.workloads) and self.trace.workloads[i].id == workload.id else None

    def holds(self, i: int, at_t: float | None = None) -> bool:
        """Whether trace workload ``i`` runs, unreleased, at ``at_t`` (default: the last observation)."""
        t = self.now_t if at_t is None else at_t
        w = self.trace.workloads[i]
        return t is not None and w.first_t <= t <= w.last_t and self.released_at[i] > t

    def release(self, i: int, at_t: float) -> None:
        self.released_at[i] = min(self.released_at[i], at_t)

    def workload(self, i: int) -> Workload:
        hit = self._workloads.get(i)
        if hit is None:
            tw = self.trace.workloads[i]
            hit = self._workloads[i] = Workload(
                id=tw.id,
                kind=WorkloadKind.JOB,
                name=tw.name,
                owner=tw.owner,
                gpus_requested=tw.requested,
                gpu_uuids=tuple(self._uuids[g] for g in tw.gpus),
                started_at=utc(tw.started_at + self.offset_s),
                source=self.name,
                # Where the trace does not say what a workload is, it is judged by behaviour
                # (unknown) unless the operator named a default for the whole trace.
                labels={CLASS_KEY: tw.workload_class or self.default_class},
                ref={REF_KEY: str(i)},
            )
        return hit

    def observe(self, now: datetime) -> Observation:
        """The samples since the previous observation and the workloads running at ``now``."""
        tr = self.trace
        t_now = self.trace_time(now)
        prev = self.now_t
        after = prev if prev is not None and prev <= t_now else t_now - self.lookback_s
        rows = tr.rows_between(after, t_now)
        self.now_t = t_now
        t, gpu, wl = tr.t[rows], tr.gpu[rows], tr.wl[rows]
        # A released workload's samples are gone from the moment it was released.
        keep = (wl < 0) | (self.released_at[np.maximum(wl, 0)] > t)
        idx = np.flatnonzero(keep)
        # Columns straight from the trace: no Sample object per GPU unless a consumer asks.
        fields = {"gpu_util_pct": tr.util, "mem_used_mib": tr.mem, "power_w": tr.power}
        fields["sm_active_pct"] = tr.sm
        samples = SampleTable(
            list(map(self._uuids.__getitem__, gpu[idx].tolist())),
            t[idx] + self.offset_s,
            {name: c[rows][idx] for name, c in fields.items() if c is not None},
        )
        running = tr.running(t_now)
        running = running[self.released_at[running] > t_now]
        return Observation(
            at=now,
            gpus=self._gpus,
            samples=samples,
            workloads=tuple(self.workload(i) for i in running.tolist()),
        )

    def history(self, start: datetime, end: datetime, step_s: float) -> list[Observation]:
        """Observations every ``step_s`` from ``start`` until before ``end`` (to fill the window)."""
        out = []
        t = start
        while t < end:
            out.append(self.observe(t))
            t = utc(t.timestamp() + step_s)
        return out

    def close(self) -> None:
        """Nothing to release: the trace lives in memory."""


@dataclass(frozen=True, slots=True)
class Stop:
    """One workload stopped in a replay."""

    index: int
    workload_id: str
    #: Trace time of the stop.
    at_t: float
    level: Level
    rule: str
    gpu_uuids: tuple[str, ...]


class ReplayExecutor:
    """Implements ``gpusteward.domain.ports.Executor`` for a ``ReplaySource``: L2-L4 release the workload."""

    def __init__(self, source: ReplaySource) -> None:
        self.source = source
        self.name = source.name
        self.stops: list[Stop] = []

    def supports(self, workload: Workload, level: Level) -> bool:
        return level >= Level.GRACEFUL_STOP and self.source.index_of(workload) is not None

    def current(self, workload: Workload) -> Workload | None:
        i = self.source.index_of(workload)
        if i is None or not self.source.holds(i):
            return None
        return self.source.workload(i)

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        i = self.source.index_of(workload)
        if i is None:
            raise ExecutionError(f"{workload.id} is not a workload of the {self.name} trace")
        if decision.level < Level.GRACEFUL_STOP:
            raise ExecutionError(f"{decision.level.label} is not a stop")
        at = self.source.now_t if self.source.now_t is not None else self.source.trace_time(decision.at)
        if self.source.released_at[i] <= at:
            return Outcome(True, f"{workload.id} already released", verified=True)
        self.source.release(i, at)
        self.stops.append(Stop(i, workload.id, at, decision.level, decision.rule, workload.gpu_uuids))
        return Outcome(
            True,
            f"released {workload.id} in the replay ({decision.level.label})",
            verified=True,
            released_gpu_uuids=workload.gpu_uuids,
        )

    def verify(self, decision: Decision, workload: Workload) -> bool:
        i = self.source.index_of(workload)
        return i is None or not self.source.holds(i)
