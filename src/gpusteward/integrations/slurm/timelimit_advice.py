"""Time-limit advice: a job that asks for far more time than its owner's jobs ever take.

A long time limit is not waste by itself, but it keeps backfill from using the GPUs around it
and hides a job that hangs. Pure: finished jobs (from sacct) and running workloads in,
advice findings out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpusteward.domain.models import Finding, RuleAction, Workload
from gpusteward.integrations.slurm.model import SacctRecord

RULE = "slurm-timelimit"


@dataclass(frozen=True, slots=True)
class Runtimes:
    """A user's finished jobs: how many, and their median and 90th-percentile runtimes."""

    user: str
    jobs: int
    median_minutes: float
    p90_minutes: float


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (no interpolation: a value some job really took)."""
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def typical_runtimes(records: Iterable[SacctRecord]) -> dict[str, Runtimes]:
    """Per user, over their COMPLETED allocations (failed and cancelled ones say little)."""
    per: dict[str, list[float]] = {}
    for r in records:
        if r.state == "COMPLETED" and r.user:
            per.setdefault(r.user, []).append(r.elapsed_minutes)
    out = {}
    for user, values in per.items():
        values.sort()
        out[user] = Runtimes(user, len(values), _quantile(values, 0.5), _quantile(values, 0.9))
    return out


def _hhmm(minutes: float) -> str:
    m = max(1, math.ceil(minutes))
    days, rest = divmod(m, 1440)
    text = f"{rest // 60:02d}:{rest % 60:02d}:00"
    return f"{days}-{text}" if days else text


def timelimit_advice(
    workloads: Iterable[Workload],
    runtimes: Mapping[str, Runtimes],
    now: datetime,
    *,
    factor: float = 3.0,
    min_jobs: int = 5,
    min_limit_minutes: float = 120.0,
) -> list[Finding]:
    """One advice finding per running job whose time limit exceeds ``factor`` × its owner's p90."""
    out = []
    for w in workloads:
        limit_text = w.annotations.get("slurm.time_limit_minutes")
        stats = runtimes.get(w.owner.user)
        if not limit_text or stats is None or stats.jobs < min_jobs:
            continue
        limit = float(limit_text)
        if limit < min_limit_minutes or limit <= factor * max(stats.p90_minutes, 1.0):
            continue
        suggest = _hhmm(stats.p90_minutes * 1.5)
        ratio = limit / max(stats.p90_minutes, 1.0)
        out.append(
            Finding(
                rule=RULE,
                kind="timelimit",
                action=RuleAction.ADVISE,
                at=now,
                gpu_uuids=w.gpu_uuids,
                workload_id=w.id,
                evidence={
                    "time_limit_minutes": dict.fromkeys(w.gpu_uuids, limit),
                    "p90_runtime_minutes": dict.fromkeys(w.gpu_uuids, stats.p90_minutes),
                    "finished_jobs": {u: float(stats.jobs) for u in w.gpu_uuids},
                },
                wasted_minutes=0.0,
                wasted_gpu_hours=0.0,
                wasted_cost=0.0,
                message=(
                    f"time limit {_hhmm(limit)} is {ratio:.0f}x the 90th-percentile runtime "
                    f"({_hhmm(stats.p90_minutes)}) of {w.owner.user}'s last {stats.jobs} finished jobs: "
                    f"consider --time={suggest}"
                ),
            )
        )
    return out
