"""What each page shows, as plain data: the JSON API returns it as is, the pages render it.

Everything comes from the state store (findings, decisions, actions, audit, approvals, the
ledger) and, when there is one, the live window (utilisation over time, evidence series).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np

from gpusteward.analysis.rules import CompiledRule, compile_rules, parse_rule_pack
from gpusteward.domain.models import ApprovalStatus, Gpu, Metric, RuleAction
from gpusteward.report import gather
from gpusteward.runtime.loop import Steward
from gpusteward.store import browse
from gpusteward.store.db import FindingEpisode, StateStore, WorkloadRecord
from gpusteward.store.ledger import LedgerStore

#: An open finding counts as "now" if the loop refreshed it this recently.
FRESH = timedelta(minutes=10)


def iso(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).isoformat()


def plain(value: Any) -> Any:
    """JSON-ready: datetimes as ISO 8601, NaN as null, enums by value."""
    return json.loads(json.dumps(value, default=_default), parse_constant=lambda _: None)


def _default(v: Any) -> Any:
    if isinstance(v, datetime):
        return iso(v)
    if isinstance(v, date):
        return v.isoformat()
    return str(v)


def to_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, header: bool = True) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    if header:
        w.writerow(columns)
    for r in rows:
        w.writerow(["" if r.get(c) is None else _cell(r.get(c)) for c in columns])
    return buf.getvalue()


def _cell(v: Any) -> str:
    if isinstance(v, datetime):
        return iso(v) or ""
    if isinstance(v, list | tuple):
        return ";".join(str(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(plain(v), sort_keys=True)
    return str(v)


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


def gpu_name(gpus: Mapping[str, Gpu], uuid: str) -> str:
    g = gpus.get(uuid)
    return g.display if g else uuid


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


def money(store: StateStore, now: datetime, *, currency: str, rate: str, days: int = 14) -> Money:
    ledger = LedgerStore(store)
    end = now.date() + timedelta(days=1)
    recent = gather(ledger, end - timedelta(days=days), end, currency=currency, rate=rate)
    span = ledger.day_range()
    total = (
        gather(ledger, span[0], span[1] + timedelta(days=1), currency=currency, rate=rate) if span else recent
    )
    per_day: dict[str, list[float]] = {}
    for row in ledger.usage(end - timedelta(days=days), end):
        acc = per_day.setdefault(row.key.day, [0.0, 0.0])
        acc[0] += row.amounts.held_gpu_hours
        acc[1] += row.amounts.busy_gpu_hours
    eff_days = sorted(per_day)
    return Money(
        days=recent.days,
        waste=recent.daily_waste_cost,
        saved=recent.daily_saved_cost,
        saved_to_date=total.saved_cost,
        waste_to_date=total.waste_cost,
        efficiency_days=eff_days,
        efficiency_pct=[100 * b / h if h > 0 else None for h, b in (per_day[d] for d in eff_days)],
    )


def idle_now(store: StateStore, now: datetime) -> tuple[set[str], float]:
    """GPUs in a fresh, open reclaim finding, and what they cost per hour."""
    idle: dict[str, float] = {}
    for e in store.open_findings():
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
    for a in store.actions(limit=5000):
        if a.created_at < since or a.created_at > now:
            continue
        i = min(23, int((a.created_at - since).total_seconds() // 3600))
        if a.level.label in series:
            series[a.level.label][i] += 1
        by_status[a.status.value] += 1
    return hours, {k: v for k, v in series.items() if any(v)} or {"L1": [0.0] * 24}, by_status


def overview(
    store: StateStore, steward: Steward | None, now: datetime, *, currency: str, rate: str, dry_run: bool
) -> dict[str, Any]:
    idle, waste_per_hour = idle_now(store, now)
    m = money(store, now, currency=currency, rate=rate)
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
        "open_findings": len(store.open_findings()),
        "pending_approvals": len(store.approvals(ApprovalStatus.PENDING)),
    }


# -- findings ------------------------------------------------------------------------------------
def finding_row(e: FindingEpisode, w: WorkloadRecord | None, gpus: Mapping[str, Gpu]) -> dict[str, Any]:
    row = e.to_dict()
    row["user"] = w.owner.user if w else ""
    row["team"] = w.owner.team if w else ""
    row["workload_name"] = w.name if w else ""
    row["gpus"] = [gpu_name(gpus, u) for u in e.finding.gpu_uuids]
    row["nodes"] = sorted({gpus[u].node for u in e.finding.gpu_uuids if u in gpus})
    row["open"] = e.ended_at is None
    return row


@dataclass(frozen=True)
class Listing:
    """One page of a list, newest first; ``next_before`` is the ``before`` of the next page."""

    rows: list[dict[str, Any]]
    next_before: int | None


def _finding_filter(
    gpus: Mapping[str, Gpu], kind: str, owner: str, team: str, node: str, status: str
) -> browse.FindingFilter:
    # A node is the GPUs the live inventory places on it, or its name in the finding's message.
    on_node = tuple(sorted(u for u, g in gpus.items() if g.node == node)) if node else ()
    return browse.FindingFilter(
        kind=kind, owner=owner, team=team, node=node, node_gpus=on_node, open_only=status != "all"
    )


def findings(
    store: StateStore,
    gpus: Mapping[str, Gpu],
    *,
    kind: str = "",
    owner: str = "",
    team: str = "",
    node: str = "",
    status: str = "open",
    limit: int = 500,
    before: int | None = None,
) -> Listing:
    """Finding episodes, newest first, filtered in the store (every filter is an exact match but
    ``node``, which also matches the node's name in the finding's message)."""
    flt = _finding_filter(gpus, kind, owner, team, node, status)
    page = browse.findings_page(store, flt, before=before, limit=limit)
    return Listing([finding_row(e, w, gpus) for e, w in page.rows], page.next_before)


def facets(store: StateStore, gpus: Mapping[str, Gpu], *, status: str = "open") -> dict[str, list[str]]:
    """The values each findings filter can take, over every (open) episode."""
    f = browse.finding_facets(store, open_only=status != "all")
    return {
        "kind": f.kinds,
        "owner": f.owners,
        "team": f.teams,
        "node": sorted({gpus[u].node for u in f.gpu_uuids if u in gpus}),
    }


# -- workload ------------------------------------------------------------------------------------
def workload(store: StateStore, wid: str, gpus: Mapping[str, Gpu]) -> dict[str, Any] | None:
    info = store.workload_info(wid)
    episodes = store.findings_for(wid)
    if info is None and not episodes:
        return None
    now_snooze = [s.to_dict() for s in store.snoozes(wid)]
    return {
        "workload": info.to_dict() if info else {"id": wid},
        "findings": [finding_row(e, info, gpus) for e in reversed(episodes)],
        "decisions": [
            {
                "at": d.at,
                "level": d.level.label,
                "step": d.step,
                "hold": d.hold.value,
                "rule": d.rule,
                "reason": d.reason,
            }
            for d in reversed(store.decisions_for(wid))
        ],
        "actions": [action_row(a) for a in reversed(store.actions(limit=200, workload_id=wid))],
        "notices": [n.to_dict() for n in reversed(store.notices(wid))],
        "approvals": [a.to_dict() for a in store.approvals(limit=500) if a.workload_id == wid],
        "snoozes": now_snooze,
        "audit": [audit_row(r) for r in reversed(store.audit_log(limit=200, workload_id=wid))],
    }


# -- actions and audit ---------------------------------------------------------------------------
ACTION_COLUMNS = ("id", "created_at", "updated_at", "workload_id", "level", "step", "rule", "status",
                  "dry_run", "attempts", "gpu_uuids", "detail", "idempotency_key")  # fmt: skip
AUDIT_COLUMNS = ("id", "at", "event", "workload_id", "payload")


def action_row(a: Any) -> dict[str, Any]:
    return {
        "id": a.id,
        "created_at": a.created_at,
        "updated_at": a.updated_at,
        "workload_id": a.workload_id,
        "level": a.level.label,
        "step": a.step,
        "rule": a.rule,
        "status": a.status.value,
        "dry_run": a.dry_run,
        "attempts": a.attempts,
        "gpu_uuids": list(a.gpu_uuids),
        "detail": a.detail,
        "idempotency_key": a.idempotency_key,
    }


def audit_row(r: Any) -> dict[str, Any]:
    return {"id": r.id, "at": r.at, "event": r.event, "workload_id": r.workload_id, "payload": r.payload}


def actions(
    store: StateStore,
    *,
    q: str = "",
    status: str = "",
    level: str = "",
    workload: str = "",
    limit: int = 200,
    before: int | None = None,
) -> Listing:
    """Actions, newest first; ``q`` matches every word (any case) in some searched column."""
    page = browse.actions_page(
        store, q=q, status=status, level=level, workload_id=workload, before=before, limit=limit
    )
    return Listing([action_row(a) for a in page.rows], page.next_before)


def audit(
    store: StateStore,
    *,
    q: str = "",
    event: str = "",
    workload: str = "",
    limit: int = 200,
    before: int | None = None,
) -> Listing:
    page = browse.audit_page(store, q=q, event=event, workload_id=workload, before=before, limit=limit)
    return Listing([audit_row(r) for r in page.rows], page.next_before)


def every_action(store: StateStore, *, before: int | None = None, **filters: str) -> Iterator[dict[str, Any]]:
    """Every matching action older than ``before``, newest first, read in chunks (exports).
    ``filters`` are those of ``browse.actions_page``."""
    pages = browse.every(lambda b, n: browse.actions_page(store, before=b, limit=n, **filters), start=before)
    return (action_row(a) for a in pages)


def every_audit(store: StateStore, *, before: int | None = None, **filters: str) -> Iterator[dict[str, Any]]:
    """Every matching audit record older than ``before``, newest first, read in chunks (exports)."""
    pages = browse.every(lambda b, n: browse.audit_page(store, before=b, limit=n, **filters), start=before)
    return (audit_row(r) for r in pages)


def csv_lines(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> Iterator[str]:
    """CSV text, the header first, a chunk of lines at a time (exports stream)."""
    yield to_csv([], columns)
    batch: list[Mapping[str, Any]] = []
    for r in rows:
        batch.append(r)
        if len(batch) >= browse.CHUNK:
            yield to_csv(batch, columns, header=False)
            batch = []
    if batch:
        yield to_csv(batch, columns, header=False)


def json_lines(rows: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """A JSON array, one element at a time (exports stream)."""
    yield "["
    for i, r in enumerate(rows):
        yield ("," if i else "") + json.dumps(plain(dict(r)))
    yield "]"


# -- rules ---------------------------------------------------------------------------------------
def rule_row(r: CompiledRule) -> dict[str, Any]:
    s = r.spec
    return {
        "name": s.name,
        "kind": s.kind,
        "action": s.action.value,
        "scope": s.scope,
        "when": s.when,
        "window_minutes": round(r.window_s / 60, 1),
        "enabled": s.enabled,
        "description": s.description.strip(),
        "message": s.message,
        "min_coverage": s.min_coverage,
    }


def rule_yaml(r: CompiledRule) -> str:
    import yaml  # PyYAML: a core dependency

    data = r.spec.model_dump(mode="json", exclude_defaults=True)
    data = {"name": r.spec.name, "kind": r.spec.kind, **data}
    text: str = yaml.safe_dump({"rules": [data]}, sort_keys=False, allow_unicode=True, width=100)
    return text


def preview(
    text: str, steward: Steward | None, now: datetime
) -> tuple[list[CompiledRule], list[dict[str, Any]]]:
    """Validate a rule pack (raises ``RuleError`` with the line) and what it flags right now in
    the live window (empty without one)."""
    pack = parse_rule_pack(text, "<edited rule>")
    window_s = steward.window.window_s if steward is not None else None
    rules = compile_rules(pack, window_s=window_s)
    if steward is None:
        return rules, []
    result = steward.analyse(now, rules)
    workloads = steward.workloads
    rows = []
    for f in result.findings:
        w = workloads.get(f.workload_id or "")
        rows.append(
            {
                "rule": f.rule,
                "kind": f.kind,
                "workload_id": f.workload_id,
                "user": w.owner.user if w else "",
                "team": w.owner.team if w else "",
                "gpus": [gpu_name(steward.gpus, u) for u in f.gpu_uuids],
                "wasted_minutes": round(f.wasted_minutes, 1),
                "wasted_cost": round(f.wasted_cost, 2),
                "message": f.message,
            }
        )
    return rules, rows
