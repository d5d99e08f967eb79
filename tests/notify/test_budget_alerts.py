"""Budget alerts and closing months (runtime.showback_step) through the real notifier chain (the
throttle around apprise) to a loopback HTTP receiver, on a real SQLite state store: each share is
told once per month, in the route's language, with the burn-rate forecast, across restarts; an
ended month with rows is closed after showback.close_after_days."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from gpusteward.analysis.budgets import BudgetSettings, TeamBudget
from gpusteward.analysis.showback import ShowbackSettings
from gpusteward.domain.errors import ConfigError
from gpusteward.domain.records import ShowbackAmounts, ShowbackKey
from gpusteward.notify.apprise_notifier import AppriseNotifier
from gpusteward.notify.basic import MemoryNotifier
from gpusteward.notify.settings import NotifySettings
from gpusteward.notify.throttle import ThrottledNotifier
from gpusteward.policy.settings import NoticeSettings
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.showback_step import ALERTS_DOC, ShowbackStep, build_showback
from gpusteward.store.db import StateStore

from .conftest import Receiver

NOV3 = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    s = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    s.create_schema()
    yield s
    s.close()


def spend(store: StateStore, day: str, team: str, amount: float) -> None:
    key = ShowbackKey(day, team, "alice", "NVIDIA H100", "on-demand", "USD")
    store.ledger.add({}, {}, showback={key: ShowbackAmounts(held_gpu_hours=amount / 3, spend=amount)})


def step(store: StateStore, receiver: Receiver) -> ShowbackStep:
    notify = NotifySettings.model_validate(
        {
            "teams": {
                "vision": {"urls": [f"json://127.0.0.1:{receiver.url.rsplit(':', 1)[1]}/vision"]},
                "finance": {
                    "urls": [f"json://127.0.0.1:{receiver.url.rsplit(':', 1)[1]}/fin"],
                    "language": "zh",
                },
            }
        }
    )
    budgets = BudgetSettings(
        teams={
            "vision": TeamBudget(amount=1000),
            "nlp": TeamBudget(amount=90, unit="gpu_hours", channel="finance"),
        },
        check_every_minutes=60,
    )
    notifier = ThrottledNotifier(AppriseNotifier(notify, store, dry_run=False), store, NoticeSettings())
    return ShowbackStep(
        store, notifier, showback=ShowbackSettings(close_after_days=3), budgets=budgets, notify=notify,
        currency="USD", web_url="https://gpus.example.org",
    )  # fmt: skip


def test_each_share_is_told_once_in_the_routes_language(store: StateStore, receiver: Receiver) -> None:
    spend(store, "2026-11-01", "vision", 550.0)  # 55 % of 1,000 by Nov 3, noon: 220 a day
    spend(store, "2026-11-02", "nlp", 150.0)  # 50 GPU-hours of 90: 56 %
    first = step(store, receiver)
    sent = first.run(NOV3)
    assert [n.dedup_key for n in sent] == ["budget:nlp:2026-11:0.5", "budget:vision:2026-11:0.5"]
    by_path = {r.path: r.body for r in receiver.requests}
    assert set(by_path) == {"/vision", "/fin"}
    vision = by_path["/vision"]
    assert vision["title"] == "GPU budget of vision: 50 % of 2026-11 used"
    assert "550.00 of 1,000.00 USD" in vision["message"]
    assert "runs out on November 5" in vision["message"]  # 1,000 / 220 a day = 4.5 days
    assert "https://gpus.example.org/showback?month=2026-11" in vision["message"]
    assert "nlp 团队 2026-11 的 GPU 预算已用 56 %" in by_path["/fin"]["message"]
    # Within the check interval nothing is looked at; after it, nothing new is crossed.
    assert first.run(NOV3.replace(minute=30)) == []
    assert first.run(NOV3.replace(hour=14)) == []
    # A restart (a new step, the same store) after more spend: only the new share, the highest.
    spend(store, "2026-11-03", "vision", 500.0)  # 105 %: 0.8 and 1.0 crossed at once
    again = step(store, receiver)
    [over] = again.run(NOV3.replace(hour=15))
    assert over.dedup_key == "budget:vision:2026-11:1"
    assert "over budget" in receiver.requests[-1].body["message"]
    assert again.run(NOV3.replace(hour=17)) == []
    assert store.load_doc(ALERTS_DOC)["2026-11"] == {"vision": [0.5, 0.8, 1.0], "nlp": [0.5]}
    assert [n.sent for n in store.notices(limit=10)].count(True) == 3
    # December: a new month, shares start again.
    spend(store, "2026-12-01", "vision", 600.0)
    [dec] = again.run(datetime(2026, 12, 1, 12, tzinfo=UTC))
    assert dec.dedup_key == "budget:vision:2026-12:0.5"


def test_an_ended_month_with_rows_is_closed_after_the_days_set(store: StateStore, receiver: Receiver) -> None:
    spend(store, "2026-10-30", "vision", 10.0)
    spend(store, "2026-11-30", "vision", 10.0)
    s = step(store, receiver)
    assert s.close_due(datetime(2026, 12, 3, 23, 59, tzinfo=UTC)) == ["2026-10"]  # November: 3 days on Dec 4
    assert s.close_due(datetime(2026, 12, 4, 0, 1, tzinfo=UTC)) == ["2026-11"]
    assert set(store.ledger.closed_months()) == {"2026-10", "2026-11"}
    assert s.close_due(datetime(2027, 3, 1, tzinfo=UTC)) == []  # months without rows stay open


def test_the_step_is_built_from_the_config_and_bad_budgets_name_the_line(
    store: StateStore, tmp_path: Path
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "cost: {currency: EUR}\nweb: {base_url: 'https://gpus.example.org/'}\n"
        "showback: {close_after_days: 2}\n"
        "budgets:\n  teams:\n    vision: {amount: 5000, alert_shares: [0.9, 0.5]}\n"
    )
    built = build_showback(load_settings(good), store, MemoryNotifier())
    assert (built.currency, built.web_url, built.showback.close_after_days) == (
        "EUR",
        "https://gpus.example.org",
        2,
    )
    assert built.budgets.teams["vision"].alert_shares == [0.5, 0.9]
    bad = tmp_path / "bad.yaml"
    bad.write_text("budgets:\n  teams:\n    vision:\n      amount: 5000\n      unit: dollars\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:5: budgets\.teams\.vision\.unit"):
        load_settings(bad)


def test_a_store_that_fails_is_logged_and_tried_again(
    store: StateStore, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    spend(store, "2026-11-01", "vision", 550.0)
    s = step(store, receiver)
    with store.transaction("rename") as conn:  # the table goes away under the agent: reads fail
        conn.execute(text("ALTER TABLE ledger_closed_months RENAME TO away"))
    assert s.run(NOV3) == []
    assert "budgets not checked" in caplog.text
    assert receiver.requests == []
    with store.transaction("rename back") as conn:
        conn.execute(text("ALTER TABLE away RENAME TO ledger_closed_months"))
    # Not held back by the check interval: the next tick tries again.
    assert [n.dedup_key for n in s.run(NOV3.replace(minute=1))] == ["budget:vision:2026-11:0.5"]
