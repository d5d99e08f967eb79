"""What one tick reports: the loop's answer, read by the driver, /metrics and the CLI."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from gpusteward.domain.health import Health
from gpusteward.domain.models import Decision, Finding
from gpusteward.domain.queue import Queue
from gpusteward.runtime.runner import ActionResult


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one tick saw and did."""

    at: datetime
    source_ok: bool
    gpus: int
    workloads: int
    findings: tuple[Finding, ...]
    decisions: tuple[Decision, ...]
    actions: tuple[ActionResult, ...]
    stale_gpus: int
    paused: bool
    errors: tuple[str, ...] = ()
    #: False on a follower replica: it sensed and analysed, but decided and did nothing.
    leader: bool = True
    #: The schedulers' queues merged, as read this tick; None when no queue was read.
    queue: Queue | None = None
    #: GPU uuid → its health this tick (worst finding wins); GPUs without health readings are absent.
    health: Mapping[str, Health] = field(default_factory=dict)
