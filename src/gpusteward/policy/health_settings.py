"""Settings for what policy does about GPU health (``policy.health``, issue 16)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class HealthSettings(BaseModel):
    """A failed GPU's node is drained as an L4 step; degrading and throttled GPUs get notices only."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    drain_failed_nodes: bool = Field(
        True,
        description="Take the node of a failed GPU out of scheduling (Slurm drain, Kubernetes cordon, "
        "a plain server's flag) where the system has a node control; elsewhere it is only reported.",
    )
    require_approval: bool = Field(
        True,
        description="A drain waits for an admin's approval (policy.approval.min_level L4 or lower); "
        "with approvals off no drain is planned, the failure is only reported. false: a drain "
        "follows policy.approval like any L4 step, and runs unasked where approvals are off.",
    )
