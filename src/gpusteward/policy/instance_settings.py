"""Settings of L4 instance stops (``cloud.instances:`` in the config): which idle GPU nodes'
cloud instances gpusteward may stop, or take out of their Auto Scaling group, and how."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: Instance families with NVIDIA GPUs that are discovered by default (``families``).
DEFAULT_FAMILIES: tuple[str, ...] = (
    "p3",
    "p3dn",
    "p4d",
    "p4de",
    "p5",
    "p5e",
    "p5en",
    "g4dn",
    "g5",
    "g6",
    "g6e",
)

LifecycleName = Literal["on-demand", "spot", "reserved"]
#: A whole instance's price per hour (the largest GPU instances cost under 100 USD/h).
InstancePrice = Annotated[float, Field(ge=0.0, le=1_000_000)]


def _on_demand() -> list[LifecycleName]:
    return ["on-demand"]


class InstanceSettings(BaseModel):
    """L4: stop the cloud instance behind a node whose GPUs have all sat free and idle for
    ``idle_minutes`` (or take it out of its Auto Scaling group). Off by default; every stop waits
    for an approval like any L4 step (``policy.approval``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = Field(False, description="Stop idle GPU nodes' instances at all (off by default).")
    idle_minutes: float = Field(
        120.0,
        gt=0,
        le=10080,
        description="Minutes every GPU of a node must be free and idle (fresh samples) before its "
        "instance is stopped.",
    )
    idle_util_pct: float = Field(
        1.0, ge=0, le=100, description="A free GPU at or below this utilisation (percent) counts as idle."
    )
    action: Literal["stop", "asg-scale-in"] = Field(
        "stop",
        description="stop: a standalone instance is stopped; one in an Auto Scaling group is put in "
        "standby (the group's desired capacity lowered by one, so it starts no replacement) and then "
        "stopped; restore starts it and returns it to service. asg-scale-in: an instance in a group "
        "is terminated with the desired capacity lowered (needs allow_terminate); restore raises "
        "the desired capacity back. Standalone instances are always stopped.",
    )
    allow_terminate: bool = Field(
        False,
        description="Allow the one step that terminates an instance (action asg-scale-in): its local "
        "disks are lost and restore launches a new instance.",
    )
    reserve_nodes: int = Field(
        1,
        ge=0,
        le=100_000,
        description="Idle GPU instances always left running, so new work starts without a boot; the "
        "most recently idle ones are kept.",
    )
    max_per_tick: int = Field(1, ge=1, le=1000, description="Instances stopped per tick at most.")
    lifecycles: list[LifecycleName] = Field(
        default_factory=_on_demand,
        description="Which instances may be stopped: on-demand saves its price; a reserved instance is "
        "paid for whether it runs or not, and a spot instance can be stopped only under a persistent "
        "request.",
    )
    families: list[str] = Field(
        default_factory=lambda: list(DEFAULT_FAMILIES),
        description="Instance families discovered (p4d, g5, ...); only types that have GPUs are kept.",
    )
    instance_tags: dict[str, str] = Field(
        default_factory=dict,
        description="Only instances carrying all these tags (e.g. {cluster: prod}); empty: every one.",
    )
    node_name: Literal["auto", "private-dns", "private-dns-short", "private-ip", "instance-id", "tag"] = (
        Field(
            "auto",
            description="How an instance is matched to the cluster's node name when the node's "
            "providerID does not name it (Kubernetes' providerID joins first, exactly, in every mode): "
            "auto tries node_name_tag, the private DNS name (whole or its first label), the private IP "
            "and the instance id; the others use only that one.",
        )
    )
    node_name_tag: str = Field(
        "Name", description="The instance tag that holds the node name (node_name tag or auto)."
    )
    price_per_hour_by_type: dict[str, InstancePrice] = Field(
        default_factory=dict,
        description="On-demand price of a whole instance per hour in this region, by instance type "
        "(e.g. {p4d.24xlarge: 32.77}); others are priced from the cost table's GPU prices. The "
        "reserved and spot rates take the cost table's discounts.",
    )
    stop_wait_seconds: float = Field(
        60.0,
        ge=0,
        le=900,
        description="How long a stop waits for the state 'stopped' before it is recorded as not yet "
        "verified (GPU instances take a minute or more).",
    )

    @model_validator(mode="after")
    def _terminate_needs_consent(self) -> InstanceSettings:
        if self.action == "asg-scale-in" and not self.allow_terminate:
            raise ValueError(
                "cloud.instances.action asg-scale-in terminates the instance: set "
                "cloud.instances.allow_terminate true, or use action stop (standby, then stop)"
            )
        return self
