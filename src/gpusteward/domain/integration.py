"""What one outside system brings to the loop, and what the loop gives it to build with.

Every package under ``integrations/`` exposes ``build(cfg, ctx) -> Integration``: ``cfg`` is its
own settings section, ``ctx`` the few loop-wide values it may need. The registry
(``runtime/registry.py``) maps a source name to that function; nothing else names a system.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gpusteward.domain.cloud import InstanceControl, InterruptionWatch
from gpusteward.domain.models import Gpu, Observation
from gpusteward.domain.nodes import NodeControl
from gpusteward.domain.ports import Clock, Executor, Leadership, Notifier, PoolScaler, Source
from gpusteward.domain.queue import Queue


def no_history(start: datetime, end: datetime, step_s: float) -> list[Observation]:
    """For sources that keep no past: the window fills from the first tick on."""
    return []


def same_prices(gpus: Sequence[Gpu]) -> Sequence[Gpu]:
    return gpus


@dataclass(frozen=True)
class BuildContext:
    """Loop-wide values an integration may build with (never the whole config tree)."""

    clock: Clock
    tick_s: float = 30.0
    window_s: float = 3600.0
    #: How long an L2 stop waits between the checkpoint signal and SIGTERM.
    stop_grace_s: float = 300.0
    #: Users never acted on (``policy.protect.users``), for executors that check them again.
    protected_users: tuple[str, ...] = ()
    #: Prices GPUs from the ``cost`` table (a trace's GPUs carry no price of their own).
    prices: Callable[[Sequence[Gpu]], Sequence[Gpu]] = same_prices
    #: The metric source a scheduler integration joins its jobs or pods with (Slurm, Kubernetes).
    metrics: Source | None = None


@dataclass
class Integration:
    """An outside system's parts. Only ``source`` is required; each other part is there when the
    system has it, and the loop uses what is there."""

    name: str
    source: Source
    executors: Sequence[Executor] = ()
    #: Observations before ``now`` that fill the window at start-up (may be empty).
    history: Callable[[datetime, datetime, float], list[Observation]] = no_history
    #: The system's node scheduling switch (L4 parking).
    node_control: NodeControl | None = None
    #: Scales a pool of replicas (L4 tidal scaling).
    pool_scaler: PoolScaler | None = None
    #: Leader election through the system itself (a Kubernetes Lease), built on demand.
    leadership: Callable[[str, str, float], Leadership] | None = None
    #: Adds the system's own channel to the configured notifier (Kubernetes: an Event on the pods).
    wrap_notifier: Callable[[Notifier], Notifier] | None = None
    #: The system's queue (pending work and recent queue times), read once per tick;
    #: absent where the system has no queue (a plain server).
    queue: Callable[[datetime], Queue] | None = None
    #: The cloud instances behind the nodes (L4 stop / start), from ``cloud:`` or the simulator.
    instances: InstanceControl | None = None
    #: Each node's provider ID by node name (Kubernetes ``spec.providerID``): the exact node ↔ instance join.
    node_ids: Callable[[], Mapping[str, str]] | None = None
    #: Where spot interruption notices come from (a metadata service, a queue), polled each tick.
    interruptions: InterruptionWatch | None = None
    #: What the system knows that an agent could not (the simulator's ground truth, for the demo).
    ground_truth: object | None = None
    #: Anything else the system's CLI commands need (its client, say).
    parts: object | None = field(default=None, repr=False)
