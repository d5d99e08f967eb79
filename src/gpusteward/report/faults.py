"""The report's GPU faults section (issue 16): GPU-hours lost to failed GPUs in the period.

From the finding episodes of ``gpu-failed`` (the loop records every finding there): each GPU
counts as lost from the episode's first sighting to its end (or its last sighting while still
open), clipped to the period; overlapping episodes of one GPU (a new holder opens a new
episode) count once. A team's page counts the GPUs its workloads held; a failed GPU nobody
held counts for the cluster only.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

from gpusteward.policy.health import FAILED_RULE
from gpusteward.report.insight_rows import Owners
from gpusteward.store.db import StateStore


@dataclass(frozen=True, slots=True)
class FaultRow:
    gpu_uuid: str
    gpu_hours: float
    first_seen_at: datetime
    #: None: still failed at the last sighting.
    ended_at: datetime | None
    workload_id: str
    user: str
    team: str
    message: str


@dataclass(frozen=True, slots=True)
class FaultSection:
    gpu_hours_lost: float = 0.0
    rows: list[FaultRow] = field(default_factory=list)


def _midnight(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def _union_hours(spans: list[tuple[datetime, datetime]]) -> float:
    total, reach = 0.0, None
    for a, b in sorted(spans):
        if reach is not None and a < reach:
            a = reach
        if b > a:
            total += (b - a).total_seconds() / 3600
            reach = b
    return total


def gather_faults(store: StateStore, start: date, end: date, *, team: str | None = None) -> FaultSection:
    """GPU-hours lost to ``gpu-failed`` GPUs during ``start`` <= day < ``end`` (per GPU, newest
    episode's message and holder)."""
    since, until = _midnight(start), _midnight(end)
    spans: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    latest: dict[str, FaultRow] = {}
    owner_of = Owners(store)
    for ep in store.all_findings():
        f = ep.finding
        if f.rule != FAILED_RULE:
            continue
        a, b = max(ep.first_seen_at, since), min(ep.ended_at or ep.last_seen_at, until)
        if b <= a:
            continue
        user, t = "", ""
        if f.workload_id is not None:
            user, t = owner_of(f.workload_id)
        if team is not None and t != team:
            continue
        for u in f.gpu_uuids:
            spans[u].append((a, b))
            row = FaultRow(u, 0.0, ep.first_seen_at, ep.ended_at, f.workload_id or "", user, t, f.message)
            if u not in latest or latest[u].first_seen_at <= row.first_seen_at:
                latest[u] = row
    rows = [
        FaultRow(
            r.gpu_uuid,
            _union_hours(spans[u]),
            r.first_seen_at,
            r.ended_at,
            r.workload_id,
            r.user,
            r.team,
            r.message,
        )
        for u, r in latest.items()
    ]
    rows.sort(key=lambda r: (-r.gpu_hours, r.gpu_uuid))
    return FaultSection(sum(r.gpu_hours for r in rows), rows)
