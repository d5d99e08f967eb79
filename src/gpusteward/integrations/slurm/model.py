"""What gpusteward keeps of a Slurm job: one value per job (a het job is one value for all its parts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """A job as squeue/scontrol shows it, reduced to what sensing and acting need."""

    #: Slurm's own job id (unique, also for array tasks); a het job's leader id.
    job_id: str
    #: How users write it: ``1234``, ``1234_7`` (array task), ``1234`` for a het job (all parts).
    display_id: str
    name: str
    user: str
    account: str
    partition: str
    qos: str
    #: Base state and flags, upper case (``RUNNING``, ``COMPLETING`` ...).
    states: frozenset[str]
    #: None when Slurm has not started it (pending) or did not say.
    started_at: datetime | None
    #: Minutes; None when unlimited or unknown.
    time_limit_minutes: int | None
    nodes: tuple[str, ...]
    #: Node → GPU indices (Slurm's ``IDX``) on that node. A node missing here holds GPUs
    #: whose indices Slurm did not report.
    gpu_indices: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: GPUs allocated (or requested while pending), all nodes together.
    gpu_count: int = 0
    gpu_type: str = ""
    comment: str = ""
    requeue: bool = False
    cluster: str = ""
    #: Slurm job ids of a het job's parts (empty for ordinary jobs).
    het_parts: tuple[str, ...] = ()
    #: When it was submitted (queue time is start - submit); None when Slurm did not say.
    submitted_at: datetime | None = None
    #: Why a pending job waits, Slurm's reason code (``Resources``, ``Priority``, ``Dependency``).
    reason: str = ""
    #: Tasks a pending array record stands for (``0-3%2``: 4 tasks, at most 2 at once → 2).
    array_tasks: int = 1

    @property
    def pending(self) -> bool:
        return "PENDING" in self.states

    @property
    def running(self) -> bool:
        """Running and not on its way out: only such a job is ever acted on."""
        return "RUNNING" in self.states and "COMPLETING" not in self.states

    @property
    def gpu_slots(self) -> list[tuple[str, int]]:
        """(node, index) of every GPU whose index is known, in node order."""
        return [(n, i) for n in self.nodes for i in self.gpu_indices.get(n, ())]


@dataclass(frozen=True, slots=True)
class JobView:
    """One reading of the controller's job table."""

    jobs: tuple[SlurmJob, ...]
    #: ``22.05.8`` (JSON) or ``""`` (text, where Slurm does not say).
    version: str
    #: ``json`` or ``text``.
    format: str
    cluster: str = ""


@dataclass(frozen=True, slots=True)
class SacctRecord:
    """One finished job (allocation) from ``sacct``."""

    job_id: str
    user: str
    account: str
    partition: str
    state: str
    elapsed_minutes: float
    time_limit_minutes: int | None


@dataclass(frozen=True, slots=True)
class SacctStart:
    """One allocation's submit and start, from ``sacct`` (queue time)."""

    job_id: str
    partition: str
    submitted_at: datetime
    started_at: datetime
    gpus: int = 0
