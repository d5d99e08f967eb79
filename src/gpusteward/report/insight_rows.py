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


class Owners:
    """(user, team) of each workload a report section names, read from its snapshot once;
    ("?", "") for a workload the store no longer knows."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self._seen: dict[str, tuple[str, str]] = {}

    def __call__(self, workload_id: str) -> tuple[str, str]:
        if workload_id not in self._seen:
            rec = self.store.workload_info(workload_id)
            self._seen[workload_id] = (rec.owner.user, rec.owner.team) if rec else ("?", "")
        return self._seen[workload_id]


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
    owner_of = Owners(store)
    for ep in store.all_findings():
        f = ep.finding
        if f.rule not in TITLES or f.workload_id is None:
            continue
        if ep.last_seen_at < since or ep.first_seen_at >= until:
            continue
        user, t = owner_of(f.workload_id)
        if team is not None and t != team:
            continue
        row = InsightRow(f.workload_id, user, t, f.rule, TITLES[f.rule], f.message, ep.last_seen_at)
        key = (f.workload_id, f.rule)
        if key not in latest or latest[key].last_seen_at <= row.last_seen_at:
            latest[key] = row
    return sorted(latest.values(), key=lambda r: (r.user, r.rule, r.workload_id))
