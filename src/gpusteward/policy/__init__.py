"""Policy: findings plus persisted ladders and ``now`` in, decisions out. Pure, no I/O."""

from gpusteward.policy.decide import PolicyInput, PolicyResult, decide, idempotency_key
from gpusteward.policy.guards import Held, StopCandidate
from gpusteward.policy.ladder import Step
from gpusteward.policy.settings import (
    BudgetSettings,
    LadderSettings,
    PolicySettings,
    ProtectSettings,
    ReserveSettings,
)

__all__ = [
    "BudgetSettings",
    "Held",
    "LadderSettings",
    "PolicyInput",
    "PolicyResult",
    "PolicySettings",
    "ProtectSettings",
    "ReserveSettings",
    "Step",
    "StopCandidate",
    "decide",
    "idempotency_key",
]
