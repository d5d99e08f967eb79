"""A simulated ``PoolScaler``: pools of replicas in memory, for the demo, tests and dry runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpusteward.domain.errors import ExecutionError
from gpusteward.domain.models import Outcome


@dataclass
class SimPoolScaler:
    """Knows the pools it was given; ``scale`` sets a pool's replicas and remembers every call.
    ``fail`` names pools whose scaling fails (to exercise error paths)."""

    pools: dict[str, int] = field(default_factory=dict)
    fail: set[str] = field(default_factory=set)
    calls: list[tuple[str, int, str]] = field(default_factory=list)
    name: str = "sim"

    @classmethod
    def of(cls, pools: Mapping[str, int]) -> SimPoolScaler:
        return cls(pools=dict(pools))

    def replicas(self, pool: str) -> int | None:
        return self.pools.get(pool)

    def scale(self, pool: str, replicas: int, reason: str) -> Outcome:
        if pool not in self.pools:
            raise ExecutionError(f"sim: no pool {pool!r}")
        if replicas < 0:
            raise ExecutionError(f"sim: replicas must not be negative ({replicas})")
        if pool in self.fail:
            raise ExecutionError(f"sim: scaling {pool} failed")
        before = self.pools[pool]
        self.pools[pool] = replicas
        self.calls.append((pool, replicas, reason))
        return Outcome(ok=True, detail=f"{pool}: {before} → {replicas} replicas", verified=True)
