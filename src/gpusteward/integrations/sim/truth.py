"""What the simulator knows and the agent does not: ground truth, endings, events, score."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from gpusteward.integrations.sim.behaviours import Behaviour


@dataclass(frozen=True, slots=True)
class Truth:
    """The ground truth of one workload that has started."""

    workload_id: str
    behaviour: Behaviour
    #: When it stopped doing useful work; None when it is productive throughout.
    wasteful_from: datetime | None
    protected: bool
    gpus: int
    started_at: datetime
    #: When it would end if nobody stopped it.
    planned_end: datetime


class EndHow(StrEnum):
    FINISHED = "finished"
    CHECKPOINTED = "checkpointed"
    TERMINATED = "terminated"
    KILLED = "killed"
    #: Its node's cloud instance was taken (a spot interruption; ``capacity.py``).
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class Ending:
    """How and when a workload ended (its GPUs were released at ``at``)."""

    workload_id: str
    how: EndHow
    at: datetime
    #: First stop action that reached it; None when it finished by itself.
    stop_at: datetime | None
    #: Ground truth at ``stop_at``: a stop of a productive workload is a false action.
    productive_at_stop: bool | None


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened in the cluster: ``start``, ``checkpoint``, ``terminate``,
    ``kill`` (actuations) or ``exit`` (detail says how)."""

    at: datetime
    workload_id: str
    kind: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Score:
    """The agent's results against the ground truth, over [cluster start, until)."""

    until: datetime
    #: Workloads ended by an action (checkpointed, terminated or killed).
    stopped: tuple[str, ...]
    #: Stopped while productive (false actions).
    false_stops: tuple[str, ...]
    #: Stopped although protected.
    protected_stops: tuple[str, ...]
    #: GPU-hours of waste the period would have had with nobody acting.
    waste_gpu_hours: float
    #: GPU-hours given back by stopping wasteful workloads: from release to their planned end.
    reclaimed_gpu_hours: float
    #: GPU-hours of productive work lost to false stops.
    lost_gpu_hours: float


@dataclass(frozen=True, slots=True)
class GpuFailure:
    """A GPU that failed (``health.py``): when it began to degrade, its precursor, its failure."""

    gpu_uuid: str
    node: str
    degrading_from: datetime
    precursor_xid: int
    precursor_at: datetime
    xid: int
    failed_at: datetime
    #: The workload that hung on it (held it when it failed), if any.
    stuck_workload: str | None
