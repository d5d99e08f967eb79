"""The hub's figures as plain data, read from its store: each member's state (fresh, stale,
never pulled), the fleet side by side, one cluster's drill-down, the fleet-wide findings and the
cross-cluster advice. The pages render these; ``/api/v1/hub/*`` returns them as JSON.

A stale member keeps its last figures, marked stale with when they were pulled; a member never
pulled has no figures (None), never zeros.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from gpusteward.hub import advice
from gpusteward.hub.settings import HubSettings, MemberSettings
from gpusteward.hub.store import HubStore, MemberState

DAY = timedelta(hours=24)
#: The overview's figures a cluster row shows (from the member's /api/v1/overview).
FIGURES = ("gpus", "idle_gpus", "waste_cost_per_hour", "saved_cost_to_date", "waste_cost_to_date",
           "open_findings", "pending_approvals", "mode", "paused", "currency")  # fmt: skip


def state_of(m: MemberState | None, settings: HubSettings, now: datetime) -> str:
    if m is None or m.last_success_at is None:
        return "never"
    return "stale" if (now - m.last_success_at).total_seconds() > settings.stale_after_seconds else "ok"


def member_row(
    member: MemberSettings, m: MemberState | None, settings: HubSettings, now: datetime
) -> dict[str, Any]:
    return {
        "name": member.name,
        "url": member.url,
        "pages_url": member.pages_url,
        "state": state_of(m, settings, now),
        "last_success_at": m.last_success_at if m else None,
        "last_attempt_at": m.last_attempt_at if m else None,
        "age_s": (now - m.last_success_at).total_seconds() if m and m.last_success_at else None,
        "failures": m.failures if m else 0,
        "last_error": m.last_error if m else "",
        "remote_name": m.remote_name if m else "",
    }


def waiting_p50_h(fleet: dict[str, Any]) -> float | None:
    """The median wait so far of the jobs waiting for GPUs at the last pull (None: no queue read)."""
    if not fleet.get("queue_read"):
        return None
    waits = [float(j["waited_s"]) for j in fleet.get("waiting", []) if j.get("waits_for_gpus")]
    return round(statistics.median(waits) / 3600, 2) if waits else 0.0


def _last_util(ov: dict[str, Any]) -> float | None:
    pcts = [u.get("pct") for u in ov.get("utilisation", []) if isinstance(u, dict)]
    return next((float(v) for v in reversed(pcts) if v is not None), None)


def cluster_rows(settings: HubSettings, store: HubStore, now: datetime) -> list[dict[str, Any]]:
    """One row per member, in config order: its state and its last figures (None: never pulled)."""
    states = store.members()
    overviews = store.snapshots("overview")
    fleets = store.snapshots("fleet")
    rows = []
    for member in settings.members:
        row = member_row(member, states.get(member.name), settings, now)
        got = overviews.get(member.name)
        ov = got[1] if got else {}
        row["pulled_at"] = got[0] if got else None
        for k in FIGURES:
            row[k] = ov.get(k) if got else None
        row["util_pct"] = _last_util(ov) if got else None
        queue = ov.get("queue") or {}
        row["jobs_waiting"] = queue.get("jobs_waiting") if queue else None
        row["queue_p50_h"] = (
            None if not queue or queue.get("p50_s") is None else round(queue["p50_s"] / 3600, 2)
        )
        fleet = fleets[member.name][1] if member.name in fleets else {}
        models = fleet.get("models", [])
        row["waiting_p50_h"] = waiting_p50_h(fleet)
        row["free_gpus"] = sum(int(m.get("free_gpus", 0)) for m in models) if models else None
        health = (ov.get("health") or {}).get("counts") or {}
        row["health"] = health
        rows.append(row)
    return rows


def totals(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Fleet sums over the members with figures; says how many of them are stale."""
    known = [r for r in rows if r["pulled_at"] is not None]

    def total(key: str) -> float | None:
        vals = [r[key] for r in known if isinstance(r[key], int | float) and not isinstance(r[key], bool)]
        return round(sum(vals), 2) if vals else None

    currencies = sorted({str(r["currency"]) for r in known if r["currency"]})
    return {
        "clusters": len(rows),
        "with_figures": len(known),
        "stale": sum(r["state"] == "stale" for r in rows),
        "never": sum(r["state"] == "never" for r in rows),
        "gpus": total("gpus"),
        "idle_gpus": total("idle_gpus"),
        "free_gpus": total("free_gpus"),
        "waste_cost_per_hour": total("waste_cost_per_hour"),
        "saved_cost_to_date": total("saved_cost_to_date"),
        "jobs_waiting": total("jobs_waiting"),
        "currency": currencies[0] if len(currencies) == 1 else "/".join(currencies),
    }


def cross_cluster(
    settings: HubSettings, store: HubStore, since: datetime, until: datetime
) -> list[dict[str, Any]]:
    found = advice.advise(
        store.waits(since, until),
        store.model_samples(since, until),
        {m.name: m.teams for m in settings.members},
        until,
        min_wait_s=settings.advice_min_wait_minutes * 60,
        min_idle_hours=settings.advice_min_idle_hours,
        max_gap_s=3 * settings.interval_seconds,
    )
    return [a.row() for a in found]


def util_series(
    store: HubStore, names: Sequence[str], now: datetime, *, span: timedelta, buckets: int = 24
) -> tuple[list[str], dict[str, list[float | None]]]:
    """Mean utilisation per cluster per slice of ``span`` (None: no sample in that slice)."""
    since = now - span
    step = span / buckets
    sums: dict[str, list[list[float]]] = {n: [[] for _ in range(buckets)] for n in names}
    for s in store.samples(since):
        if s["cluster"] in sums and s["util_pct"] is not None:
            k = min(buckets - 1, int((s["at"] - since) / step))
            sums[s["cluster"]][k].append(float(s["util_pct"]))
    labels = [(since + step * (k + 1)).strftime("%H:%M") for k in range(buckets)]
    return labels, {n: [sum(v) / len(v) if v else None for v in per] for n, per in sums.items()}


def chart_span(settings: HubSettings, store: HubStore, now: datetime) -> timedelta:
    """24 h, or less while the hub has pulled for less (at least 12 pulls' worth)."""
    first = store.first_sample_at(now - DAY)
    have = (now - first) if first else timedelta(0)
    floor = timedelta(seconds=12 * settings.interval_seconds)
    return max(floor, min(timedelta(hours=24), have * 1.05))


def cluster_detail(settings: HubSettings, store: HubStore, name: str, now: datetime) -> dict[str, Any] | None:
    member = settings.member(name)
    if member is None:
        return None
    row = next(r for r in cluster_rows(settings, store, now) if r["name"] == name)
    got = store.snapshots("overview").get(name)
    ov = got[1] if got else {}
    fleet = store.snapshots("fleet").get(name)
    rollout = store.snapshots("rollout").get(name)
    return {
        **row,
        "teams": member.teams,
        "waste_cost_per_day": ov.get("waste_cost_per_day", []),
        "saved_cost_per_day": ov.get("saved_cost_per_day", []),
        "queue": ov.get("queue"),
        "models": (fleet[1].get("models", []) if fleet else []),
        "rollout": rollout[1] if rollout else [],
        "findings": [f for _, f in store.findings(name, limit=50)],
        "actions": store.actions(name, limit=50),
    }


def fleet_findings(settings: HubSettings, store: HubStore, cluster: str, limit: int) -> list[dict[str, Any]]:
    pages = {m.name: m.pages_url for m in settings.members}
    return [
        {**f, "cluster": c, "member_url": pages.get(c, "")}
        for c, f in store.findings(cluster, limit=limit)
        if c in pages
    ]


def finite(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else 0.0
