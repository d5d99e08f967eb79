"""Settings of the interruption watch (``cloud.interruption``): where spot and preemption notices
come from, and what gpusteward does when one arrives."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class InterruptionSettings(BaseModel):
    """Spot / preemptible instances: the cloud's word that a node is about to be taken, and the
    checkpoint signal every workload on it then gets."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = Field(
        True,
        description="Watch for interruption notices when cloud.provider names a cloud; false: never.",
    )
    act: Literal["checkpoint", "notify"] = Field(
        "checkpoint",
        description="On a notice: checkpoint (every workload on the node gets its checkpoint signal at "
        "once, even in dry-run, and its owner is told) or notify (owners are told, nothing is signalled).",
    )
    metadata_url: str = Field(
        "",
        description="The instance metadata service's base URL; empty: the provider's own "
        "(http://169.254.169.254 for aws and azure, http://metadata.google.internal for gcp).",
    )
    watch_metadata: bool = Field(
        True,
        description="Poll this node's instance metadata service (the node agent: source nvml); turn "
        "off where the agent does not run on a cloud instance of the cluster.",
    )
    poll_seconds: float = Field(
        5.0,
        gt=0,
        le=60,
        description="Least time between two polls of the metadata service or the queue; they are "
        "polled on the loop's tick, so the effective interval is the larger of this and tick_seconds.",
    )
    timeout_seconds: float = Field(
        2.0, gt=0, le=30, description="Connect and read timeout of one metadata request."
    )
    backoff_max_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Longest wait before polling a metadata service or queue again after it failed "
        "(doubling from poll_seconds).",
    )
    sqs_queue_url: str = Field(
        "",
        description="An SQS queue fed by an EventBridge rule for 'EC2 Spot Instance Interruption "
        "Warning' (and 'EC2 Instance Rebalance Recommendation') events: cluster-wide notices; empty: none.",
    )
    warning_seconds: float = Field(
        0.0,
        ge=0,
        le=3600,
        description="Time from a notice to the instance being taken, where the notice gives none; 0: "
        "the provider's (aws 120, gcp 30, azure 30 or the event's NotBefore).",
    )
    requeue_before_deadline_seconds: float = Field(
        30.0,
        ge=0,
        le=600,
        description="In enforce (not dry-run), this long before the deadline each workload that can be "
        "is requeued (Slurm scontrol requeue) or evicted (Kubernetes), so the scheduler restarts it "
        "elsewhere from its checkpoint; 0: never.",
    )
