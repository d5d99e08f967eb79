"""Showback: what each team and owner held, used, wasted and had reclaimed, and what it cost,
from the ledger's showback rows (``domain.records.ShowbackRow``). Pure: rows in, figures out.

``spend`` is the held GPU-hours at each GPU's price for its rate; ``power_cost`` the measured
energy at the electricity price, where both are known. A team's total is their sum.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpusteward.domain.records import (
    SHOWBACK_AMOUNTS,
    ShowbackAmounts,
    ShowbackRow,
    add_showback,
    month_start,
    next_month,
)
from gpusteward.domain.store_ports import Ledger

#: The label of GPUs no workload held (the ledger keeps their team empty).
UNALLOCATED = "(unallocated)"


class ShowbackSettings(BaseModel):
    """The ``showback`` config section: closing months, and the names a FOCUS export carries."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    close_after_days: int = Field(
        5,
        ge=0,
        le=60,
        description="Days after a month ends that the agent closes it: its showback rows are then "
        "frozen, and amounts that arrive later count on the day they arrive.",
    )
    billing_account_id: str = Field(
        "gpusteward",
        min_length=1,
        max_length=255,
        description="FOCUS BillingAccountId (and Name): the account finance books this cluster's GPUs to.",
    )
    provider_name: str = Field(
        "gpusteward",
        min_length=1,
        max_length=255,
        description="FOCUS ProviderName, PublisherName and InvoiceIssuerName: who provides the GPUs "
        "(your platform team or cloud).",
    )
    region_id: str | None = Field(
        None, max_length=64, description="FOCUS RegionId of the cluster (e.g. us-east-1); unset: null."
    )


def month_range(month: str) -> tuple[date, date]:
    """The first day of ``month`` (YYYY-MM) and of the next; ValueError naming the form otherwise."""
    return month_start(month), month_start(next_month(month))


def month_of_time(at: datetime) -> str:
    return f"{at.year:04d}-{at.month:02d}"


def previous_month(month: str) -> str:
    return month_of_time(datetime.combine(month_start(month) - timedelta(days=1), datetime.min.time()))


def months_to_close(
    now: datetime, close_after_days: int, closed: Iterable[str], first_day: str | None
) -> list[str]:
    """The months with rows (from ``first_day``'s) that ended at least ``close_after_days`` days
    before ``now`` and are not closed yet, oldest first."""
    if first_day is None:
        return []
    shut, out = set(closed), list[str]()
    month = first_day[:7]
    while True:
        end = month_start(next_month(month))
        if now.date() < end + timedelta(days=close_after_days):
            return out
        if month not in shut:
            out.append(month)
        month = next_month(month)


def team_label(team: str) -> str:
    return team or UNALLOCATED


def api_rows(rows: Sequence[ShowbackRow]) -> list[dict[str, Any]]:
    """Rows as ``GET /api/v1/showback`` and the JSON export give them (the hub reads this shape)."""
    return [
        {
            "day": r.key.day,
            "team": r.key.team,
            "user": r.key.user,
            "gpu_model": r.key.gpu_model,
            "rate": r.key.rate,
            "held_gpu_hours": r.amounts.held_gpu_hours,
            "used_gpu_hours": r.amounts.used_gpu_hours,
            "wasted_gpu_hours": r.amounts.wasted_gpu_hours,
            "reclaimed_gpu_hours": r.amounts.reclaimed_gpu_hours,
            "spend": r.amounts.spend,
            "power_cost": r.amounts.power_cost,
        }
        for r in rows
    ]


@dataclass(slots=True)
class TeamTotal:
    team: str
    amounts: ShowbackAmounts = field(default_factory=ShowbackAmounts)
    users: set[str] = field(default_factory=set)

    @property
    def cost(self) -> float:
        return self.amounts.spend + self.amounts.power_cost

    @property
    def used_share(self) -> float | None:
        held = self.amounts.held_gpu_hours
        return self.amounts.used_gpu_hours / held if held > 0 else None


def team_totals(rows: Iterable[ShowbackRow]) -> list[TeamTotal]:
    """Per team (most expensive first), the month's amounts added up."""
    teams: dict[str, TeamTotal] = {}
    for r in rows:
        t = teams.setdefault(r.key.team, TeamTotal(r.key.team))
        add_showback(t.amounts, r.amounts)
        t.users.add(r.key.user)
    return sorted(teams.values(), key=lambda t: (-t.cost, t.team))


def owner_totals(rows: Iterable[ShowbackRow]) -> dict[tuple[str, str], ShowbackAmounts]:
    """Per (team, user), the amounts added up."""
    out: dict[tuple[str, str], ShowbackAmounts] = {}
    for r in rows:
        add_showback(out.setdefault((r.key.team, r.key.user), ShowbackAmounts()), r.amounts)
    return out


def daily_cost_by_team(rows: Iterable[ShowbackRow]) -> dict[str, dict[str, float]]:
    """Day → team → spend plus power cost, for the stacked chart."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in rows:
        out[r.key.day][r.key.team] += r.amounts.spend + r.amounts.power_cost
    return {day: dict(teams) for day, teams in sorted(out.items())}


def month_days(month: str) -> list[str]:
    start, end = month_range(month)
    return [(start + timedelta(days=i)).isoformat() for i in range((end - start).days)]


def totals(rows: Iterable[ShowbackRow]) -> Mapping[str, float]:
    acc = ShowbackAmounts()
    for r in rows:
        add_showback(acc, r.amounts)
    return {n: getattr(acc, n) for n in SHOWBACK_AMOUNTS}


def read_month(ledger: Ledger, month: str, *, team: str | None = None) -> tuple[list[ShowbackRow], bool]:
    """The month's showback rows (of one team) and whether the month is closed."""
    start, end = month_range(month)
    return ledger.showback(start, end, team=team), month in ledger.closed_months()


def showback_doc(month: str, closed: bool, currency: str, rows: Sequence[ShowbackRow]) -> dict[str, Any]:
    """The month as ``GET /api/v1/showback`` answers it (the hub reads this shape), rows in one
    currency: the configured one."""
    mine = [r for r in rows if r.key.currency == currency]
    return {"month": month, "closed": closed, "currency": currency, "rows": api_rows(mine)}
