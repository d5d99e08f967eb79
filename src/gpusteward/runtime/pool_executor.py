"""Tidal scaling as an ``Executor``: scale-down / scale-up on a pool workload, through a ``PoolScaler``.

A pool is a synthetic workload (``Workload(id="pool:<name>", kind=POOL)``, see ``pool_workload``),
so scaling goes through the ``ActionRunner`` like every other step: pre-flight, pause, dry-run,
approval, idempotency, retry and audit. The system-specific part is the ``PoolScaler`` (the
Kubernetes scale subresource, the simulator), injected.

Safety: the decision's key carries the replicas the plan was made for; a pool that someone else
scaled since is left alone (the next plan starts from what it runs then).
"""

from __future__ import annotations

from types import MappingProxyType

from gpusteward.domain.errors import ExecutionError, PreflightFailed
from gpusteward.domain.models import Decision, Level, Outcome, Workload, WorkloadKind, utc
from gpusteward.domain.ports import PoolScaler
from gpusteward.policy.scaling import pool_workload_id, scale_replicas
from gpusteward.runtime.parking_executor import ADMINS


def pool_workload(pool: str, scaler: str) -> Workload:
    return Workload(
        id=pool_workload_id(pool),
        kind=WorkloadKind.POOL,
        name=pool,
        owner=ADMINS,
        gpus_requested=0,
        gpu_uuids=(),
        started_at=utc(0),  # no incarnation of its own
        source=scaler,
        ref=MappingProxyType({"pool": pool}),
    )


class PoolScalingExecutor:
    """Implements ``Executor`` for pool workloads of ``scaler.name`` at L4."""

    def __init__(self, scaler: PoolScaler) -> None:
        self.scaler = scaler
        self.name = scaler.name

    def supports(self, workload: Workload, level: Level) -> bool:
        return level is Level.INFRA and workload.kind is WorkloadKind.POOL and workload.source == self.name

    def current(self, workload: Workload) -> Workload | None:
        return workload if self.scaler.replicas(workload.name) is not None else None

    def execute(self, decision: Decision, workload: Workload) -> Outcome:
        pool = workload.name
        wanted = scale_replicas(decision.idempotency_key)
        if wanted is None:
            raise ExecutionError(
                f"{decision.step} of {pool}: no replica count in {decision.idempotency_key!r}"
            )
        planned, target = wanted
        now = self.scaler.replicas(pool)
        if now is None:
            raise PreflightFailed(f"pool {pool} is gone")
        if now == target:
            return Outcome(True, f"{pool} already runs {target} replicas", verified=True)
        if now != planned:
            raise PreflightFailed(
                f"pool {pool} runs {now} replicas, not the {planned} the plan was made for: left alone"
            )
        got = self.scaler.scale(pool, target, decision.reason)
        return Outcome(got.ok, got.detail, verified=got.verified)

    def verify(self, decision: Decision, workload: Workload) -> bool:
        wanted = scale_replicas(decision.idempotency_key)
        return wanted is not None and self.scaler.replicas(workload.name) == wanted[1]
