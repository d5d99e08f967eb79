"""The cloud under the nodes, as the loop sees it: the instance behind each node, the port that
stops and starts instances (L4), and an interruption notice (a spot instance about to be taken).

Two implementations of each port: AWS (``integrations/cloud``, boto3 against EC2 and Auto Scaling)
and the simulator's (``integrations/sim``), so the demo and the tests run the same loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol, runtime_checkable

#: Instance or group tags gpusteward honours (the same words as the Kubernetes annotations).
PROTECT_TAG = "gpusteward.io/protect"
EXCLUDE_UNTIL_TAG = "gpusteward.io/exclude-until"
#: L4 steps on a node workload whose node runs on a cloud instance.
STOP_INSTANCE_STEP = "stop-instance"
START_INSTANCE_STEP = "start-instance"
#: An interruption's step: every workload on the node gets its checkpoint signal at once.
INTERRUPTION_CHECKPOINT_STEP = "checkpoint-before-interruption"


def instance_workload_id(instance_id: str) -> str:
    """What ``gpusteward restore node/<id>`` names (the instance id, or the node name)."""
    return f"node/{instance_id}"


class Lifecycle(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    #: On-demand covered by a reservation (``describe_reserved_instances``): already paid for.
    RESERVED = "reserved"


@dataclass(frozen=True, slots=True)
class Instance:
    """One cloud instance that backs a GPU node."""

    id: str
    #: The cluster's node name it backs (joined through providerID, Slurm node name, DNS or IP).
    node: str
    instance_type: str
    lifecycle: Lifecycle
    #: The provider's state now: pending, running, stopping, stopped, shutting-down, terminated.
    state: str
    launched_at: datetime
    gpus: int
    #: What it costs per hour at its rate (the cost model's table), in ``currency``.
    price_per_hour: float = 0.0
    currency: str = "USD"
    zone: str = ""
    #: Its Auto Scaling group (or managed node group), if any.
    group: str = ""
    #: ``gpusteward.io/protect=true`` on the instance or its group: never stopped.
    protected: bool = False
    #: Scale-in protection set on it in its group: never picked for a scale-in.
    scale_in_protected: bool = False
    #: ``gpusteward.io/exclude-until`` on the instance or group: left alone until then.
    exclude_until: datetime | None = None
    #: Other names the node may go by (provider ID, private DNS name and IP, instance id, a tag),
    #: tried when the cluster's node name is not ``node`` (see ``policy.instances.match_nodes``).
    aliases: tuple[str, ...] = ()
    #: What ``stop`` recorded on the instance or its group for the undo (empty: not stopped by us).
    recorded: Mapping[str, str] = field(default_factory=dict)

    def excluded(self, now: datetime) -> bool:
        return self.protected or (self.exclude_until is not None and now < self.exclude_until)


@runtime_checkable
class InstanceControl(Protocol):
    """A cloud's instances behind the cluster's nodes. Reads raise ``SourceError`` when the cloud
    cannot be reached; changes raise ``ExecutionError`` when it refused (never half-done: a change
    that failed leaves what it found)."""

    name: str

    def instances(self) -> Mapping[str, Instance]:
        """Every GPU instance backing a node, by node name."""
        ...

    def instance(self, instance_id: str) -> Instance | None:
        """One instance read now (pre-flight and verify); None when it no longer exists."""
        ...

    def stop(self, instance: Instance, reason: str) -> str:
        """Stop it (or scale its group in by it); returns what was done, to record for the undo."""
        ...

    def start(self, instance_id: str, record: Mapping[str, str]) -> str:
        """Undo a ``stop`` from what it recorded (start the instance, raise the group back)."""
        ...


class NoticeKind(StrEnum):
    #: The instance will be taken (AWS spot instance-action, GCP preempted, Azure Preempt).
    INTERRUPTION = "interruption"
    #: AWS's rebalance recommendation: at elevated risk of interruption, no deadline yet.
    REBALANCE = "rebalance"


@dataclass(frozen=True, slots=True)
class InterruptionNotice:
    """A cloud's word that a node's instance is (or may soon be) taken away."""

    node: str
    instance_id: str
    provider: str
    kind: NoticeKind
    #: When the instance will be taken (AWS gives the time; else seen_at plus the provider's warning).
    deadline: datetime | None
    seen_at: datetime
    #: Where it came from: imds, gce-metadata, azure-scheduled-events, sqs.
    via: str
    #: The notice as received, cut short (for the audit).
    raw: str = ""

    @property
    def key(self) -> str:
        """One notice handled once, however many times it is read."""
        return f"{self.provider}:{self.instance_id}:{self.kind.value}"


class InterruptionWatch(Protocol):
    """Where interruption notices come from (a metadata service on the node, a queue for the
    cluster). ``poll`` never raises for a down endpoint: it logs and returns nothing."""

    def poll(self, now: datetime) -> list[InterruptionNotice]: ...
