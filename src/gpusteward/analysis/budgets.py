"""Monthly GPU budgets per team: how much of it is spent, the burn-rate forecast ("at this rate
the budget runs out on the 23rd") and which alert shares have been crossed. Pure.

The burn rate is the month's spend so far over the days elapsed (today counted by the hours gone),
so a forecast made early in the month moves as the month fills in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpusteward.analysis.showback import TeamTotal, month_range

BudgetUnit = Literal["money", "gpu_hours"]


class TeamBudget(BaseModel):
    """One team's monthly budget."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    amount: float = Field(gt=0, le=1e12, description="The monthly budget, in the cost currency or GPU-hours.")
    unit: BudgetUnit = Field(
        "money", description="money: spend plus power cost in cost.currency; gpu_hours: GPU-hours held."
    )
    alert_shares: list[Annotated[float, Field(gt=0, le=10)]] = Field(
        default_factory=lambda: [0.5, 0.8, 1.0],
        min_length=1,
        max_length=10,
        description="Shares of the budget (0.5 = 50 %) at which the team is told, once each per month.",
    )
    channel: str | None = Field(
        None,
        max_length=255,
        description="A team name under notify.teams whose route hears the alerts; unset: the team's own.",
    )

    @field_validator("alert_shares")
    @classmethod
    def _ascending(cls, shares: list[float]) -> list[float]:
        return sorted(set(shares))


class BudgetSettings(BaseModel):
    """The ``budgets`` config section: a monthly GPU budget per team."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    teams: dict[str, TeamBudget] = Field(default_factory=dict, description="Team name -> its monthly budget.")
    check_every_minutes: float = Field(
        60, ge=1, le=1440, description="How often the agent compares the ledger with the budgets."
    )


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    team: str
    month: str
    unit: BudgetUnit
    budget: float
    spent: float
    #: Spent over budget (1.0 = all of it).
    share: float
    #: Spent per day so far.
    burn_per_day: float
    #: The month's total at this burn rate.
    forecast: float
    #: The day the budget runs out at this rate; None: it lasts the month (or is already spent).
    runout_day: date | None
    #: The alert shares crossed so far, ascending.
    crossed: tuple[float, ...]


def spent(total: TeamTotal | None, unit: BudgetUnit) -> float:
    if total is None:
        return 0.0
    return total.cost if unit == "money" else total.amounts.held_gpu_hours


def status(team: str, budget: TeamBudget, month: str, total: TeamTotal | None, now: datetime) -> BudgetStatus:
    """Where ``team`` stands against its budget in ``month`` at ``now``."""
    start, end = month_range(month)
    month_days = (end - start).days
    upto = min(now.astimezone(UTC), datetime.combine(end, time(), UTC))
    days = max((upto - datetime.combine(start, time(), UTC)).total_seconds() / 86400, 0.0)
    used = spent(total, budget.unit)
    burn = used / days if days > 0 else 0.0
    runout: date | None = None
    if burn > 0 and used < budget.amount:
        runs_out_after = budget.amount / burn  # days from the month's start
        if runs_out_after < month_days:
            runout = start + timedelta(days=math.floor(runs_out_after))
    share = used / budget.amount
    return BudgetStatus(
        team=team,
        month=month,
        unit=budget.unit,
        budget=budget.amount,
        spent=used,
        share=share,
        burn_per_day=burn,
        forecast=burn * month_days,
        runout_day=runout,
        crossed=tuple(s for s in budget.alert_shares if share >= s),
    )
