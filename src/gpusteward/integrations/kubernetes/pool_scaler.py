"""``PoolScaler`` for Deployments and StatefulSets: the scale subresource, 409-safe.

A pool is named ``<namespace>/deployment/<name>`` or ``<namespace>/statefulset/<name>``.
Tidal scaling (the forecasting side) decides the count; this only sets it.
"""

from __future__ import annotations

from gpusteward.domain.errors import ExecutionError, SourceError
from gpusteward.domain.models import Outcome
from gpusteward.integrations.kubernetes.control import DEPLOYMENTS, STATEFULSETS, KubeControl, Res, metadata

_KINDS: dict[str, Res] = {"deployment": DEPLOYMENTS, "statefulset": STATEFULSETS}


def parse_pool(pool: str) -> tuple[Res, str, str] | None:
    parts = pool.split("/")
    if len(parts) != 3 or parts[1].lower() not in _KINDS or not parts[0] or not parts[2]:
        return None
    return _KINDS[parts[1].lower()], parts[0], parts[2]


class KubernetesPoolScaler:
    """Implements ``gpusteward.domain.ports.PoolScaler``."""

    name = "kubernetes"

    def __init__(self, api: KubeControl, *, conflict_retries: int = 3) -> None:
        self.api = api
        self.conflict_retries = conflict_retries

    def replicas(self, pool: str) -> int | None:
        where = parse_pool(pool)
        if where is None:
            return None
        try:
            got = self.api.get_scale(*where)
        except SourceError as e:
            raise ExecutionError(f"read scale of {pool}: {e}") from e
        if got.status == 404:
            return None
        if not got.ok:
            raise ExecutionError(f"read scale of {pool}: HTTP {got.status}: {got.message}")
        return int((got.body.get("spec") or {}).get("replicas") or 0)

    def scale(self, pool: str, replicas: int, reason: str) -> Outcome:
        where = parse_pool(pool)
        if where is None:
            raise ExecutionError(f"unknown pool {pool!r}: expected <namespace>/deployment|statefulset/<name>")
        if replicas < 0:
            raise ExecutionError(f"cannot scale {pool} to {replicas}")
        for _ in range(self.conflict_retries + 1):
            try:
                got = self.api.get_scale(*where)
                if got.status == 404:
                    raise ExecutionError(f"pool {pool} not found")
                if not got.ok:
                    raise ExecutionError(f"read scale of {pool}: HTTP {got.status}: {got.message}")
                now = int((got.body.get("spec") or {}).get("replicas") or 0)
                if now == replicas:
                    return Outcome(True, f"{pool} already at {replicas} replicas", verified=True)
                rv = metadata(got.body).get("resourceVersion")
                body = {"metadata": {"resourceVersion": rv}, "spec": {"replicas": replicas}}
                put = self.api.patch_scale(*where, body)
            except SourceError as e:
                raise ExecutionError(f"scale {pool}: {e}") from e
            if put.status == 409:
                continue
            if not put.ok:
                raise ExecutionError(f"scale {pool}: HTTP {put.status}: {put.message}")
            got_n = int((put.body.get("spec") or {}).get("replicas") or 0)
            return Outcome(
                True, f"scaled {pool} from {now} to {replicas} ({reason})", verified=got_n == replicas
            )
        raise ExecutionError(f"scale {pool}: still 409 Conflict after {self.conflict_retries} retries")
