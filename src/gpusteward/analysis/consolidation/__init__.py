"""Consolidation: pack light services onto shared GPUs, planned from what they really use.

``usage`` puts every workload's samples on one time grid; ``profiles`` describes each workload
(utilisation and memory by hour of day, bursts, which bursts coincide); ``packing`` packs them,
time-aware (the joint demand over the history must fit) or naively (peaks and p95s added up);
``replay`` scores a plan on a later stretch of history; ``mig`` finds MIG layouts and smaller
cards. Pure: arrays and parameters in, plans out.
"""

from gpusteward.analysis.consolidation.packing import (
    Group,
    Item,
    PackSettings,
    Plan,
    plan_naive,
    plan_time_aware,
)
from gpusteward.analysis.consolidation.profiles import Profile, burst_cooccurrence, profiles
from gpusteward.analysis.consolidation.replay import Replay, replay
from gpusteward.analysis.consolidation.usage import Usage, to_grid

__all__ = [
    "Group",
    "Item",
    "PackSettings",
    "Plan",
    "Profile",
    "Replay",
    "Usage",
    "burst_cooccurrence",
    "plan_naive",
    "plan_time_aware",
    "profiles",
    "replay",
    "to_grid",
]
