"""The vocabulary of gpusteward: GPUs, samples, workloads, findings, decisions, actions.

Everything here is a frozen value. Units are in the field names (``_pct``, ``_mib``,
``_w``, ``_s``); times are timezone-aware UTC ``datetime``s. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum, StrEnum
from types import MappingProxyType

#: Label / annotation that protects a workload from any action beyond a notice.
PROTECT_KEY = "gpusteward.io/protect"
#: Label / annotation holding an RFC 3339 time until which a workload is excluded.
EXCLUDE_UNTIL_KEY = "gpusteward.io/exclude-until"


def _empty() -> Mapping[str, str]:
    return MappingProxyType({})


def utc(ts: float) -> datetime:
    """Epoch seconds to an aware UTC datetime."""
    return datetime.fromtimestamp(ts, tz=UTC)


class Metric(StrEnum):
    """Per-GPU metrics the window store keeps. The value is the field name on ``Sample``."""

    GPU_UTIL = "gpu_util_pct"
    MEM_USED = "mem_used_mib"
    POWER = "power_w"
    TEMP = "temp_c"
    SM_ACTIVE = "sm_active_pct"
    PCIE_RX = "pcie_rx_bytes_per_s"
    PCIE_TX = "pcie_tx_bytes_per_s"
    PROC_CPU = "proc_cpu_pct"
    #: Requests the holder served per second (vLLM, Triton, Knative/KServe), where exported.
    REQUESTS = "requests_per_s"
    # Health (issue 16). Counters are the driver's volatile totals (since the driver loaded);
    # each is None where the source cannot read it, never 0 by default.
    #: Code of the most recent Xid event seen since the previous sample (0: none).
    XID = "xid_code"
    #: 1 when an Xid since the previous sample means the GPU itself failed
    #: (``domain.health.XIDS``: fell off the bus, double-bit ECC, …), else 0.
    XID_FATAL = "xid_fatal"
    ECC_DBE = "ecc_dbe_count"
    ECC_SBE = "ecc_sbe_count"
    #: Retired pages (Volta and older) or remapped rows (Ampere and newer), total.
    RETIRED_PAGES = "retired_pages"
    #: 1 when row remapping failed (or a page retirement is pending), else 0.
    REMAP_FAILURE = "row_remap_failure"
    #: 1 while the clocks are held down by a hardware or thermal slowdown or power brake
    #: (``domain.health.SLOWDOWN_REASONS``); idle and application-clock reasons do not count.
    THROTTLED = "throttled"
    PCIE_REPLAY = "pcie_replay_count"


#: GPU health readings: sparse (not every source has them), so they never gate judging.
HEALTH_METRICS = frozenset(
    {
        Metric.XID,
        Metric.XID_FATAL,
        Metric.ECC_DBE,
        Metric.ECC_SBE,
        Metric.RETIRED_PAGES,
        Metric.REMAP_FAILURE,
        Metric.THROTTLED,
        Metric.PCIE_REPLAY,
    }
)


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU or MIG instance, keyed by UUID."""

    uuid: str
    node: str
    index: int
    model: str
    memory_total_mib: float
    price_per_hour: float = 0.0
    pool: str = "default"

    @property
    def display(self) -> str:
        return f"{self.node}/gpu{self.index}"


@dataclass(frozen=True, slots=True)
class Sample:
    """One observation of one GPU. ``None`` means the source could not measure it."""

    gpu_uuid: str
    at: datetime
    gpu_util_pct: float | None = None
    mem_used_mib: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    sm_active_pct: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    #: CPU use of the process(es) holding the GPU, percent of one core.
    proc_cpu_pct: float | None = None
    #: Requests per second the holder served (a serving framework's own metric), where the
    #: source has one; missing stays missing, never 0.
    requests_per_s: float | None = None
    # Health (see ``Metric``): None where the source cannot read it.
    xid_code: float | None = None
    xid_fatal: float | None = None
    ecc_dbe_count: float | None = None
    ecc_sbe_count: float | None = None
    retired_pages: float | None = None
    row_remap_failure: float | None = None
    throttled: float | None = None
    pcie_replay_count: float | None = None

    def value(self, metric: Metric) -> float | None:
        v: float | None = getattr(self, metric.value)
        return v


class WorkloadKind(StrEnum):
    JOB = "job"
    POD = "pod"
    PROCESS = "process"
    #: A whole node, as L4 parking (cordon / drain) sees it: ``Workload(id="node:<name>")``.
    NODE = "node"
    #: A pool of replicas, as tidal scaling sees it: ``Workload(id="pool:<name>")``.
    POOL = "pool"


@dataclass(frozen=True, slots=True)
class Owner:
    user: str
    team: str = ""
    contact: str | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    """What holds GPUs: a Slurm job, a pod, a process.

    ``ref`` carries what an executor needs to reach it (pid and its start time,
    namespace/name, job id); it is opaque to analysis and policy.
    """

    id: str
    kind: WorkloadKind
    name: str
    owner: Owner
    gpus_requested: int
    gpu_uuids: tuple[str, ...]
    started_at: datetime
    source: str = ""
    labels: Mapping[str, str] = field(default_factory=_empty)
    annotations: Mapping[str, str] = field(default_factory=_empty)
    ref: Mapping[str, str] = field(default_factory=_empty)

    @property
    def incarnation(self) -> str:
        """Distinguishes a restarted workload that reuses an id (pid reuse, job requeue)."""
        return str(int(self.started_at.timestamp()))

    def tag(self, key: str) -> str | None:
        """A label or, failing that, an annotation."""
        return self.labels.get(key, self.annotations.get(key))


@dataclass(frozen=True, slots=True)
class Observation:
    """What one source saw at one time."""

    at: datetime
    gpus: tuple[Gpu, ...]
    #: A tuple, or a ``domain.sample_table.SampleTable`` from a source that reads arrays.
    samples: Sequence[Sample]
    workloads: tuple[Workload, ...]
    #: Problems that did not stop the observation (one GPU unreadable, say).
    errors: tuple[str, ...] = ()


class RuleAction(StrEnum):
    """What a rule's finding may lead to."""

    #: The GPUs can be given back: the ladder may escalate to stopping the workload.
    RECLAIM = "reclaim"
    #: Advice only (right-size, anomaly): never more than a notice.
    ADVISE = "advise"
    #: GPU health (kind ``health``): the GPU needs repair or watching. Never a stop of the
    #: holder; a failed GPU holds its holder's reclaim ladder and may drain its node (L4).
    REPAIR = "repair"


@dataclass(frozen=True, slots=True)
class Finding:
    """Waste seen by one rule on one workload (or on GPUs no workload holds)."""

    rule: str
    kind: str
    action: RuleAction
    at: datetime
    gpu_uuids: tuple[str, ...]
    workload_id: str | None
    #: The aggregates that tripped the rule, by expression text, per GPU uuid.
    evidence: Mapping[str, Mapping[str, float]]
    #: How long the waste has lasted, as far as the window shows.
    wasted_minutes: float
    wasted_gpu_hours: float
    wasted_cost: float
    message: str = ""

    @property
    def key(self) -> str:
        return f"{self.workload_id or '-'}:{self.rule}"


class Level(IntEnum):
    """Intervention levels, in escalation order."""

    NONE = 0
    NOTIFY = 1
    GRACEFUL_STOP = 2
    FORCE = 3
    INFRA = 4

    @property
    def label(self) -> str:
        return "-" if self is Level.NONE else f"L{int(self)}"


class Hold(StrEnum):
    """Why a decision does less than the ladder would: one reason, machine-readable."""

    NONE = ""
    PROTECTED = "protected"
    EXCLUDED = "excluded"
    STARTUP_GRACE = "startup-grace"
    RESERVE = "reserve-pool"
    BUDGET = "budget"
    PAUSED = "paused"
    STALE = "no-fresh-data"
    WAITING = "waiting"
    ADVICE_ONLY = "advice-only"
    PARTIAL = "partly-busy"
    SNOOZED = "snoozed"
    AWAITING_APPROVAL = "awaiting-approval"
    #: An admin rejected this step: it is not asked again during the waste episode.
    REJECTED = "approval-rejected"
    #: Outside the configured working hours (policy.working_hours): L2+ waits for them.
    OFF_HOURS = "off-hours"
    #: The workload's roll-out scope is in observe (nothing) or notify (warnings only).
    SCOPE = "scope"
    #: A GPU it holds has failed (rule ``gpu-failed``): its low utilisation is the fault's.
    GPU_FAULT = "gpu-fault"


@dataclass(frozen=True, slots=True)
class Decision:
    """What policy chose for one workload this tick, including why nothing is done."""

    workload_id: str
    at: datetime
    level: Level
    #: Ladder step name (``warn-1``, ``warn-2``, ``graceful-stop``, ``force``) or ``""``.
    step: str
    reason: str
    hold: Hold = Hold.NONE
    rule: str = ""
    gpu_uuids: tuple[str, ...] = ()
    #: Unique per workload incarnation and ladder step: the same step never runs twice.
    idempotency_key: str = ""

    @property
    def acts(self) -> bool:
        return self.level is not Level.NONE and self.hold is Hold.NONE

    @property
    def signature(self) -> tuple[int, str, str]:
        """What tells a workload's decisions apart: a store keeps one only when this changes."""
        return int(self.level), self.step, self.hold.value


class ActionStatus(StrEnum):
    PLANNED = "planned"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"


class ApprovalStatus(StrEnum):
    """An approval request: ``pending`` until decided or expired; ``used`` once its action ran."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    USED = "used"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an executor reports back."""

    ok: bool
    detail: str
    #: The executor checked afterwards that the effect happened (GPUs released, job gone).
    verified: bool = False
    released_gpu_uuids: tuple[str, ...] = ()
    #: Set by ``StagedExecutor.begin``: the stop is under way (checkpoint signal sent) and its
    #: follow-up (``complete``) is due this many seconds from now; the action stays ``executing``.
    follow_up_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class Action:
    """One step carried out (or planned, or refused) against a workload."""

    id: int
    idempotency_key: str
    workload_id: str
    level: Level
    step: str
    rule: str
    status: ActionStatus
    dry_run: bool
    created_at: datetime
    updated_at: datetime
    attempts: int = 0
    detail: str = ""
    gpu_uuids: tuple[str, ...] = ()
    #: An ``executing`` action with ``due_at`` is a stop under way by design (not a crash
    #: leftover): its follow-up runs on the first tick at or after this time.
    due_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Notice:
    """A message to a workload's owner (or to admins when ``owner`` is None)."""

    at: datetime
    workload_id: str
    owner: Owner | None
    subject: str
    body: str
    level: Level = Level.NOTIFY
    dedup_key: str = ""


@dataclass(frozen=True, slots=True)
class LadderState:
    """Where one workload stands on the escalation ladder. Persisted, so restarts forget nothing."""

    workload_id: str
    #: ``Workload.incarnation`` the ladder was climbed for; a restarted workload starts afresh.
    incarnation: str
    rule: str
    #: First tick of this waste episode (the finding has held on every fresh tick since).
    first_seen_at: datetime
    last_seen_at: datetime
    #: Last step taken: ``""``, ``warn-1``, ``warn-2``, ``graceful-stop``, ``force``.
    step: str = ""
    step_at: datetime | None = None
    first_warned_at: datetime | None = None
    #: Since when fresh, judged data has shown no waste; None while the finding holds.
    clean_since: datetime | None = None
