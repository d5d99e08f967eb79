"""The latest consolidation plan as a stored document (``Docs`` port), so that a reader outside
the leader's process (the weekly report) sees the plan the leader acts on.

Only the leader writes it, in the record phase, and only when its content changed: a re-plan that
comes out the same is not written again, so ``planned_at`` (the plan the content was written from)
can be older than the latest re-plan. Bounded: the shared groups (at most ``MAX_GROUPS``), the
teams (at most ``MAX_TEAMS``, the rest summed as one row) and the moved workloads (at most
``MAX_MOVED``), each id cut to ``MAX_ID`` characters; the totals always count everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpusteward.analysis.consolidation import Item, Plan
from gpusteward.analysis.consolidation.mig import MONTH_HOURS
from gpusteward.analysis.cost import PriceTable

PLAN_KEY = "consolidation.plan"
VERSION = 1
MAX_GROUPS = 200
MAX_TEAMS = 40
MAX_MOVED = 200
MAX_ID = 253  # a Kubernetes name's limit
NO_TEAM = "(no team)"
OTHER_TEAMS = "(other teams)"


def _cut(text: str) -> str:
    return text[:MAX_ID]


def _teams(rows: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    """Teams with the most GPUs now first up to ``MAX_TEAMS`` (the rest as one row), by name."""
    ranked = sorted(rows.items(), key=lambda kv: (-kv[1][0], kv[0]))
    kept = dict(ranked[: MAX_TEAMS - 1] if len(ranked) > MAX_TEAMS else ranked)
    rest = [v for t, v in ranked if t not in kept]
    out = {_cut(t): {"now": v[0], "after": v[1]} for t, v in sorted(kept.items())}
    if rest:
        out[OTHER_TEAMS] = {"now": sum(v[0] for v in rest), "after": sum(v[1] for v in rest)}
    return out


def plan_document(
    plan: Plan,
    items: Mapping[str, Item],
    moved: Iterable[str],
    prices: PriceTable,
    *,
    resource: str,
    planned_at: datetime,
) -> dict[str, Any]:
    """The plan as plain JSON: groups, GPUs before and after, money a month, contention, by team."""

    def team(group_members: tuple[str, ...]) -> str:
        item = items.get(group_members[0])
        return (item.team if item else "") or NO_TEAM

    def price(member: str) -> float:
        item = items.get(member)
        return prices.price_for(item.gpu_model if item else "")

    shared = [g for g in plan.groups if len(g.members) > 1]
    by_team: dict[str, list[int]] = {}
    for g in plan.groups:
        row = by_team.setdefault(team(g.members), [0, 0])
        row[0] += len(g.members)
        row[1] += 1
    freed_per_hour = sum(price(g.members[0]) * (len(g.members) - 1) for g in shared)
    moved_ids = sorted(moved)
    return {
        "version": VERSION,
        "planned_at": planned_at.isoformat(),
        "method": plan.method,
        "resource": resource,
        "gpus_before": plan.gpus_before,
        "gpus_after": plan.gpus_after,
        "money_per_month": round(freed_per_hour * MONTH_HOURS, 2),
        "currency": prices.currency,
        "contention_share_max": round(max((g.contention_share for g in shared), default=0.0), 6),
        "groups_total": len(shared),
        "groups": [
            {
                "members": [_cut(m) for m in g.members],
                "team": _cut(team(g.members)),
                "mode": g.mode,
                "contention_share": round(g.contention_share, 6),
                "peak_memory_gib": round(g.peak_memory_mib / 1024, 2),
            }
            for g in shared[:MAX_GROUPS]
        ],
        "by_team": _teams(by_team),
        "moved_total": len(moved_ids),
        "moved": [_cut(m) for m in moved_ids[:MAX_MOVED]],
    }


@dataclass(frozen=True, slots=True)
class StoredGroup:
    members: tuple[str, ...]
    team: str
    mode: str
    contention_share: float
    peak_memory_gib: float


@dataclass(frozen=True, slots=True)
class StoredPlan:
    """The document as read back; see ``plan_document`` for what each field means."""

    planned_at: datetime
    method: str
    resource: str
    gpus_before: int
    gpus_after: int
    money_per_month: float
    currency: str
    contention_share_max: float
    groups_total: int
    groups: tuple[StoredGroup, ...]
    by_team: dict[str, tuple[int, int]]  # team → (GPUs now, GPUs after)
    moved_total: int
    moved: tuple[str, ...]

    @property
    def gpus_freed(self) -> int:
        return self.gpus_before - self.gpus_after


def read_plan(value: Any) -> StoredPlan | None:
    """The stored document, or None when there is none or it is not one this version reads (a
    reader never fails on it: the leader writes a fresh one with its next changed plan)."""
    if not isinstance(value, dict) or value.get("version") != VERSION:
        return None
    try:
        return StoredPlan(
            planned_at=datetime.fromisoformat(value["planned_at"]),
            method=str(value["method"]),
            resource=str(value["resource"]),
            gpus_before=int(value["gpus_before"]),
            gpus_after=int(value["gpus_after"]),
            money_per_month=float(value["money_per_month"]),
            currency=str(value["currency"]),
            contention_share_max=float(value["contention_share_max"]),
            groups_total=int(value["groups_total"]),
            groups=tuple(
                StoredGroup(
                    tuple(str(m) for m in g["members"]),
                    str(g["team"]),
                    str(g["mode"]),
                    float(g["contention_share"]),
                    float(g["peak_memory_gib"]),
                )
                for g in value["groups"]
            ),
            by_team={str(t): (int(v["now"]), int(v["after"])) for t, v in value["by_team"].items()},
            moved_total=int(value["moved_total"]),
            moved=tuple(str(m) for m in value["moved"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
