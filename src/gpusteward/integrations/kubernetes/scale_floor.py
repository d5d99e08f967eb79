"""How far an idle service may be scaled down: to zero only where it wakes on demand.

A Deployment, StatefulSet or LeaderWorkerSet at zero replicas answers no request until someone
scales it up again. That is a stop only for a service that something wakes when traffic comes
back (KEDA's HTTP add-on, a Knative-style activator); any other service keeps a minimum and only
its extra replicas are given back. The owner says which on the unit (or its pods):

- ``gpusteward.io/wakes-on-demand: "true"``: scale to ``scale_to_replicas`` (default 0);
- ``gpusteward.io/min-replicas: "N"``: never below N;
- neither: ``min_replicas`` of ``source.kubernetes`` (default 1).

A unit already at its floor has nothing left to give back: it is marked protected with the
reason, so it gets notices and is never stopped (its ladder cannot escalate past them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

WAKES_ON_DEMAND_KEY = "gpusteward.io/wakes-on-demand"
MIN_REPLICAS_KEY = "gpusteward.io/min-replicas"
#: ``Workload.ref`` key: the replica count an L2 scales the unit to.
FLOOR_REF = "scale_floor"


@dataclass(frozen=True, slots=True)
class ScaleFloor:
    #: Where a service that wakes on demand goes (``scale_to_replicas``).
    wake_to: int = 0
    #: Where every other service stops (``min_replicas``).
    min_replicas: int = 1

    def of(self, tags: Mapping[str, str]) -> tuple[int, str]:
        """The floor for a unit with these labels/annotations, and why."""
        if tags.get(WAKES_ON_DEMAND_KEY, "").strip().lower() == "true":
            return self.wake_to, f"it wakes on demand ({WAKES_ON_DEMAND_KEY})"
        raw = tags.get(MIN_REPLICAS_KEY, "").strip()
        if raw.isdigit():
            return int(raw), f"its {MIN_REPLICAS_KEY}"
        return self.min_replicas, "the configured min_replicas; it does not wake on demand"


def replicas_of(obj: Mapping[str, Any]) -> int | None:
    """``spec.replicas`` of a unit as read (None when it does not say)."""
    spec = obj.get("spec")
    value = spec.get("replicas") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def at_floor(kind: str, name: str, replicas: int | None, floor: int, why: str) -> str | None:
    """The protection reason for a unit with nothing left to give back, else None."""
    if replicas is None or replicas > floor:
        return None
    return (
        f"{kind} {name} runs {replicas} replica{'s' if replicas != 1 else ''}, its minimum of {floor} "
        f"({why}); annotate {WAKES_ON_DEMAND_KEY}=true if something scales it up from zero"
    )
