"""The ``source.sim`` section: the built-in simulated cluster."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SimSourceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    nodes: int = Field(8, ge=1, le=4096, description="Simulated nodes.")
    gpus_per_node: int = Field(8, ge=1, le=64, description="GPUs per simulated node.")
    seed: int = Field(42, ge=0, le=2**32 - 1, description="Seed: the same seed gives the same cluster.")
    scenario: Literal["default", "small"] = Field("default", description="Workload mix.")
    history_hours: float = Field(
        6.0,
        ge=0,
        le=24 * 31,
        description="How long the simulated cluster has been running when the agent starts.",
    )
    drop_rate: float = Field(0.0, ge=0, le=1, description="Share of samples lost, to exercise missing data.")
    cloud_nodes: bool = Field(
        False,
        description="Run every node on a simulated cloud instance: L4 can stop and start it, "
        "and spot instances are interrupted (integrations/sim/cloud.py, spot.py).",
    )
    instance_type: str = Field(
        "p4d.24xlarge", min_length=1, max_length=64, description="The instance type of every node."
    )
    spot_share: float = Field(0.25, ge=0, le=1, description="Share of nodes on spot instances.")
    reserved_share: float = Field(
        0.25, ge=0, le=1, description="Share of nodes on reserved instances (the rest are on-demand)."
    )
    interruptions_per_day: float = Field(
        1.0, ge=0, le=1000, description="Spot interruptions a day across the spot nodes, on average."
    )
    spot_replacement_minutes: float = Field(
        10.0,
        ge=0,
        le=24 * 60,
        description="How long after a spot instance is taken its replacement joins the cluster.",
    )
