"""The fleet reports: the weekly report (each cluster's last 7 days side by side, and the
cross-cluster advice over them) and the fleet showback (per team and cluster, from the members'
``/api/v1/showback``)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from datetime import date, datetime, timedelta
from typing import Any

from gpusteward.hub.settings import HubSettings
from gpusteward.hub.store import HubStore
from gpusteward.hub.views import cluster_rows, cross_cluster, finite

WEEK = timedelta(days=7)
SHOWBACK_SUMS = (
    "held_gpu_hours",
    "used_gpu_hours",
    "wasted_gpu_hours",
    "reclaimed_gpu_hours",
    "spend",
    "power_cost",
)


def _week_sum(per_day: list[dict[str, Any]], first: date) -> float | None:
    days = [d for d in per_day if isinstance(d, dict) and str(d.get("day", "")) >= first.isoformat()]
    return round(sum(finite(d.get("cost")) for d in days), 2) if days else None


def weekly(settings: HubSettings, store: HubStore, now: datetime) -> dict[str, Any]:
    since = now - WEEK
    first = since.date()
    overviews = store.snapshots("overview")
    samples: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in store.samples(since):
        samples[s["cluster"]].append(s)
    rows = []
    for row in cluster_rows(settings, store, now):
        ov = overviews[row["name"]][1] if row["name"] in overviews else {}
        mine = samples.get(row["name"], [])
        util = [s["util_pct"] for s in mine if s["util_pct"] is not None]
        waits = [s["queue_p50_s"] for s in mine if s["queue_p50_s"] is not None]
        rows.append(
            {
                "name": row["name"],
                "state": row["state"],
                "pulled_at": row["pulled_at"],
                "currency": row["currency"],
                "gpus": row["gpus"],
                "mean_util_pct": round(statistics.fmean(util), 1) if util else None,
                "waste_cost_7d": _week_sum(ov.get("waste_cost_per_day", []), first) if ov else None,
                "saved_cost_7d": _week_sum(ov.get("saved_cost_per_day", []), first) if ov else None,
                "queue_p50_h": round(statistics.median(waits) / 3600, 2) if waits else None,
                "samples": len(mine),
            }
        )
    return {
        "since": since,
        "until": now,
        "clusters": rows,
        "advice": cross_cluster(settings, store, since, now),
    }


def showback(settings: HubSettings, store: HubStore, month: str) -> dict[str, Any]:
    """Per cluster and team: the month's GPU-hours and spend, summed over days, users and models."""
    got = store.showback(month)
    sums: dict[tuple[str, str], dict[str, float]] = {}
    currencies: dict[str, str] = {}
    closed: dict[str, bool] = {}
    for member in settings.members:
        body = got.get(member.name)
        if body is None:
            continue
        currencies[member.name] = str(body.get("currency", ""))
        closed[member.name] = bool(body.get("closed", False))
        for r in body.get("rows", []):
            if not isinstance(r, dict):
                continue
            acc = sums.setdefault((member.name, str(r.get("team", ""))), dict.fromkeys(SHOWBACK_SUMS, 0.0))
            for k in SHOWBACK_SUMS:
                acc[k] += finite(r.get(k))
    rows = [
        {
            "cluster": c,
            "team": t or "(none)",
            "currency": currencies[c],
            **{k: round(v, 2) for k, v in a.items()},
        }
        for (c, t), a in sorted(sums.items())
    ]
    missing = [m.name for m in settings.members if m.name not in got]
    return {"month": month, "rows": rows, "closed": closed, "missing": missing}
