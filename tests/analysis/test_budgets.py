"""Budgets: the share spent, the burn-rate forecast and its run-out day, the alert shares crossed."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from pydantic import ValidationError

from gpusteward.analysis.budgets import BudgetSettings, TeamBudget, status
from gpusteward.analysis.showback import team_totals
from gpusteward.domain.records import ShowbackAmounts, ShowbackKey, ShowbackRow


def total(spend: float, power: float = 0.0, held: float = 0.0):  # type: ignore[no-untyped-def]
    row = ShowbackRow(
        ShowbackKey("2026-11-02", "vision", "alice", "NVIDIA H100", "on-demand", "USD"),
        ShowbackAmounts(held_gpu_hours=held, spend=spend, power_cost=power),
    )
    [t] = team_totals([row])
    return t


def test_the_burn_rate_says_when_the_budget_runs_out() -> None:
    # 10 days into November, 4,000 of 10,000 spent: 400 a day, out on day 25 (Nov 26 begins it).
    now = datetime(2026, 11, 11, tzinfo=UTC)
    s = status("vision", TeamBudget(amount=10_000), "2026-11", total(3_900, 100), now)
    assert s.spent == pytest.approx(4_000)
    assert s.burn_per_day == pytest.approx(400)
    assert s.forecast == pytest.approx(12_000)
    assert s.runout_day == date(2026, 11, 26)
    assert s.crossed == ()
    assert s.share == pytest.approx(0.4)


def test_a_budget_that_lasts_the_month_has_no_runout_and_crossed_shares_are_listed() -> None:
    now = datetime(2026, 11, 16, tzinfo=UTC)  # 15 days gone
    lasting = status("vision", TeamBudget(amount=10_000), "2026-11", total(4_500), now)
    assert lasting.runout_day is None  # 300 a day: 9,000 by the 30th
    spent = status("vision", TeamBudget(amount=10_000), "2026-11", total(8_200), now)
    assert spent.crossed == (0.5, 0.8)
    over = status("vision", TeamBudget(amount=8_000), "2026-11", total(8_200), now)
    assert (over.crossed, over.runout_day) == ((0.5, 0.8, 1.0), None)


def test_gpu_hour_budgets_count_held_hours_and_a_past_month_uses_all_its_days() -> None:
    now = datetime(2026, 12, 20, tzinfo=UTC)
    s = status("vision", TeamBudget(amount=600, unit="gpu_hours"), "2026-11", total(99, held=300), now)
    assert (s.spent, s.burn_per_day, s.share) == (300, 10, 0.5)
    assert status("vision", TeamBudget(amount=1), "2026-11", None, now).spent == 0


def test_bad_budgets_are_refused() -> None:
    with pytest.raises(ValidationError, match="less than or equal to 10"):
        TeamBudget(amount=100, alert_shares=[80])
    with pytest.raises(ValidationError):
        BudgetSettings.model_validate({"teams": {"vision": {"amount": 0}}})
    with pytest.raises(ValidationError):
        BudgetSettings.model_validate({"teams": {"vision": {"amount": 10, "currency": "EUR"}}})
