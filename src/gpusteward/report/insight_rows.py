"""The report's right-sizing and anomaly section: the insight findings of the period, per owner.

They come from the finding episodes (the loop records every finding there), joined with the
workload snapshots for owner and team, so the report shows what owners were told, with the
evidence sentence they got.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime

from gpusteward.store.db import StateStore

#: Insight rules (runtime/insights.py) and how the report names them.
TITLES = {
    "right-size-gpus": "request fewer GPUs",
    "gpu-too-large": "GPU too large",
    "input-bound": "input-bound",
    "anomaly": "unusual behaviour",
}


@dataclass(frozen=True, slots=True)
class InsightRow:
    workload_id: str
    user: str
    team: str
    rule: str
    title: str
    message: str
    last_seen_at: datetime


def gather_insights(
    store: StateStore, start: date, end: date, *, team: str | None = None
) -> list[InsightRow]:
    """Each workload's latest insight per rule seen during ``start`` <= day < ``end``, by owner."""
    since = datetime(start.year, start.month, start.day, tzinfo=UTC)
    until = datetime(end.year, end.month, end.day, tzinfo=UTC)
    latest: dict[tuple[str, str], InsightRow] = {}
    owners: dict[str, tuple[str, str]] = {}
    for ep in store.all_findings():
        f = ep.finding
        if f.rule not in TITLES or f.workload_id is None:
            continue
        if ep.last_seen_at < since or ep.first_seen_at >= until:
            continue
        if f.workload_id not in owners:
            rec = store.workload_info(f.workload_id)
            owners[f.workload_id] = (rec.owner.user, rec.owner.team) if rec else ("?", "")
        user, t = owners[f.workload_id]
        if team is not None and t != team:
            continue
        row = InsightRow(f.workload_id, user, t, f.rule, TITLES[f.rule], f.message, ep.last_seen_at)
        key = (f.workload_id, f.rule)
        if key not in latest or latest[key].last_seen_at <= row.last_seen_at:
            latest[key] = row
    return sorted(latest.values(), key=lambda r: (r.user, r.rule, r.workload_id))
