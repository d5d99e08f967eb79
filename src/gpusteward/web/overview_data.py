"""The overview's figures as plain data: cluster utilisation over the live window, idle GPUs and
what they cost, waste and savings per day, efficiency, the last day's actions, and the live
false-kill ratio and reclaim success rate."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from gpusteward.domain.models import ApprovalStatus, Metric, RuleAction
from gpusteward.policy.settings import PolicySettings
from gpusteward.runtime.loop import Steward
from gpusteward.store import browse
from gpusteward.store.db import FindingEpisode, StateStore
from gpusteward.store.ledger import LedgerStore
from gpusteward.web import health_data, rollout_data
from gpusteward.web.data import gpu_name

if TYPE_CHECKING:
    from gpusteward.web.context import WebContext

#: An open finding counts as "now" if the loop refreshed it this recently.
FRESH = timedelta(minutes=10)


# -- live window ---------------------------------------------------------------------------------
def utilisation_series(
    steward: Steward | None, now: datetime, *, buckets: int = 12
) -> tuple[list[str], list[float | None]]:
    """Mean GPU utilisation of the cluster per slice of the window (oldest first); None where no
    GPU had a sample in that slice (no data is not 0 %)."""
    if steward is None or len(steward.window) == 0:
        return [], []
    span_s = steward.window.window_s / buckets
    labels, values = [], []
    for k in range(buckets - 1, -1, -1):
        at = now - timedelta(seconds=k * span_s)
        view = steward.window.view(at)
        per_gpu = view.mean(Metric.GPU_UTIL, span_s)
        labels.append(at.astimezone(UTC).strftime("%H:%M"))
        values.append(float(np.nanmean(per_gpu)) if np.isfinite(per_gpu).any() else None)
    return labels, values


def gpu_series(
    steward: Steward | None, uuids: Sequence[str], metric: Metric, now: datetime, *, buckets: int = 12
) -> tuple[list[str], dict[str, list[float | None]]]:
    """Per GPU, the mean of ``metric`` per slice of the window (a workload's evidence over time)."""
    if steward is None or not uuids or len(steward.window) == 0:
        return [], {}
    span_s = steward.window.window_s / buckets
    labels: list[str] = []
    out: dict[str, list[float | None]] = {gpu_name(steward.gpus, u): [] for u in uuids}
    for k in range(buckets - 1, -1, -1):
        at = now - timedelta(seconds=k * span_s)
        view = steward.window.view(at)
        means = view.mean(metric, span_s)
        labels.append(at.astimezone(UTC).strftime("%H:%M"))
        for u in uuids:
            i = view.index_of(u)
            v = float(means[i]) if i is not None else math.nan
            out[gpu_name(steward.gpus, u)].append(v if math.isfinite(v) else None)
    return labels, out


# -- overview ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Money:
    days: list[str]
    waste: list[float]
    saved: list[float]
    saved_to_date: float
    waste_to_date: float
    efficiency_days: list[str]
    efficiency_pct: list[float | None]


def money(store: StateStore, now: datetime, *, currency: str, days: int = 14) -> Money:
    ledger = LedgerStore(store)
    end = now.date() + timedelta(days=1)
    start = end - timedelta(days=days)
    # Sums in SQL: a report of these days would read every action and ledger row of them.
    by_day = ledger.money_by_day(start, end, currency)
    day_keys = [(start + timedelta(days=i)).isoformat() for i in range(days)]
    waste_to_date, saved_to_date = ledger.totals(currency)
    per_day = ledger.use_by_day(start, end)
    eff_days = sorted(per_day)
    return Money(
        days=day_keys,
        waste=[by_day.get(d, (0.0, 0.0))[0] for d in day_keys],
        saved=[by_day.get(d, (0.0, 0.0))[1] for d in day_keys],
        saved_to_date=saved_to_date,
        waste_to_date=waste_to_date,
        efficiency_days=eff_days,
        efficiency_pct=[100 * b / h if h > 0 else None for h, b in (per_day[d] for d in eff_days)],
    )


def idle_now(
    store: StateStore, now: datetime, open_episodes: Sequence[FindingEpisode] | None = None
) -> tuple[set[str], float]:
    """GPUs in a fresh, open reclaim finding, and what they cost per hour."""
    idle: dict[str, float] = {}
    for e in store.open_findings() if open_episodes is None else open_episodes:
        f = e.finding
        if f.action is not RuleAction.RECLAIM or now - e.last_seen_at > FRESH:
            continue
        price = f.wasted_cost / f.wasted_gpu_hours if f.wasted_gpu_hours > 0 else 0.0
        for u in f.gpu_uuids:
            idle[u] = max(idle.get(u, 0.0), price)
    return set(idle), sum(idle.values())


def actions_last_day(
    store: StateStore, now: datetime
) -> tuple[list[str], dict[str, list[float]], Counter[str]]:
    """Actions of the last 24 h per hour and level (dry-run included: it shows what would be done)."""
    since = now - timedelta(hours=24)
    hours = [(since + timedelta(hours=i + 1)).strftime("%H:00") for i in range(24)]
    levels = ["L1", "L2", "L3", "L4"]
    series = {lv: [0.0] * 24 for lv in levels}
    by_status: Counter[str] = Counter()
    # Every one of them (the newest 5,000 actions were less than a day at 10,000 GPUs).
    for created_at, level, status in browse.action_times(store, since, now + timedelta(microseconds=1)):
        i = min(23, int((created_at - since).total_seconds() // 3600))
        if level.label in series:
            series[level.label][i] += 1
        by_status[status] += 1
    return hours, {k: v for k, v in series.items() if any(v)} or {"L1": [0.0] * 24}, by_status


def for_context(ctx: WebContext) -> dict[str, Any]:
    """The overview the page and ``/api/v1/overview`` both show, from the web context."""
    cost = ctx.settings.cost
    return overview(
        ctx.store,
        ctx.steward(),
        ctx.now(),
        currency=cost.currency,
        dry_run=ctx.dry_run,
        policy=ctx.settings.policy,
    )


def overview(
    store: StateStore,
    steward: Steward | None,
    now: datetime,
    *,
    currency: str,
    dry_run: bool,
    policy: PolicySettings,
) -> dict[str, Any]:
    open_episodes = store.open_findings()
    idle, waste_per_hour = idle_now(store, now, open_episodes)
    safety = rollout_data.figures(store, policy)
    m = money(store, now, currency=currency)
    labels, util = utilisation_series(steward, now)
    hours, per_level, by_status = actions_last_day(store, now)
    pause = store.pause_state()
    return {
        "at": now,
        "mode": "dry-run" if dry_run else "enforce",
        "paused": pause.paused,
        "currency": currency,
        "idle_gpus": len(idle),
        "gpus": len(steward.gpus) if steward else None,
        "waste_cost_per_hour": round(waste_per_hour, 2),
        "waste_cost_per_day": [{"day": d, "cost": round(c, 2)} for d, c in zip(m.days, m.waste, strict=True)],
        "saved_cost_per_day": [{"day": d, "cost": round(c, 2)} for d, c in zip(m.days, m.saved, strict=True)],
        "saved_cost_to_date": round(m.saved_to_date, 2),
        "waste_cost_to_date": round(m.waste_to_date, 2),
        "utilisation": [
            {"at": t, "pct": None if v is None else round(v, 1)} for t, v in zip(labels, util, strict=True)
        ],
        "efficiency_per_day": [
            {"day": d, "pct": None if v is None else round(v, 1)}
            for d, v in zip(m.efficiency_days, m.efficiency_pct, strict=True)
        ],
        "actions_24h": dict(by_status),
        "actions_24h_by_hour": {"hours": hours, "levels": per_level},
        "open_findings": len(open_episodes),
        "pending_approvals": len(store.approvals(ApprovalStatus.PENDING)),
        # The live safety figures (policy.rollout.safety_figures): ratios, None before any stop.
        "safety": safety,
        # Issue 16: GPUs per health state (failed/degrading listed) and the last queue read (None: unread).
        "health": health_data.health(store, steward, now, fresh=FRESH),
        "queue": health_data.queue(health_data.latest_queue(steward)),
    }
