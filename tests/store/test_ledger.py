"""The ledger tables: amounts add up, usage keeps maxima, marks persist; on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from gpusteward.domain.models import ActionStatus, Decision, Level, Owner, Workload, WorkloadKind
from gpusteward.report import gather
from gpusteward.store.db import StateStore
from gpusteward.store.ledger import DailyAmounts, DailyKey, LedgerStore, Mark, UsageAmounts, UsageKey, day_key

T0 = datetime(2025, 3, 4, 10, 0, tzinfo=UTC)


@pytest.fixture
def state(store: StateStore) -> StateStore:
    """The store fixture (SQLite and PostgreSQL) under the name these tests use."""
    return store


def key(day: str = "2025-03-04", user: str = "alice", team: str = "vision", kind: str = "idle") -> DailyKey:
    return DailyKey(day, "USD", user, team, kind)


def test_daily_amounts_add_up(state: StateStore) -> None:
    ledger = LedgerStore(state)
    ledger.add({key(): DailyAmounts(waste_gpu_hours=1.5, waste_cost=4.5, waste_kwh=0.1)}, {})
    ledger.add(
        {
            key(): DailyAmounts(
                waste_gpu_hours=0.5, waste_cost=1.5, saved_gpu_hours=2, saved_cost=6, stops=1
            ),
            key(user="bob", team="nlp"): DailyAmounts(waste_gpu_hours=3, waste_cost=9),
            key(day="2025-03-05"): DailyAmounts(stops=2),
        },
        {},
    )
    rows = {r.key: r.amounts for r in ledger.daily(date(2025, 3, 4), date(2025, 3, 6))}
    assert rows[key()] == DailyAmounts(2.0, 6.0, 0.1, 2.0, 6.0, 1)
    assert rows[key(user="bob", team="nlp")] == DailyAmounts(3.0, 9.0)
    assert rows[key(day="2025-03-05")].stops == 2
    assert [r.key for r in ledger.daily(date(2025, 3, 4), date(2025, 3, 5))] == [
        key(),
        key("2025-03-04", "bob", "nlp"),
    ]
    assert [r.key.user for r in ledger.daily(date(2025, 3, 4), date(2025, 3, 6), team="nlp")] == ["bob"]
    assert ledger.day_range() == (date(2025, 3, 4), date(2025, 3, 5))


def test_totals_and_money_per_day_are_the_sums_a_report_gives(state: StateStore) -> None:
    ledger = LedgerStore(state)
    assert ledger.totals("USD") == (0.0, 0.0)
    ledger.add(
        {
            key(): DailyAmounts(waste_gpu_hours=1.5, waste_cost=4.5, saved_gpu_hours=1, saved_cost=2.25),
            key(user="bob", team="nlp", kind="zombie"): DailyAmounts(waste_cost=9.0),
            key(day="2025-03-09"): DailyAmounts(waste_cost=0.75, saved_cost=10.0),
            DailyKey("2025-03-05", "EUR", "alice", "vision", "idle"): DailyAmounts(waste_cost=100.0),
        },
        {},
    )
    span = ledger.day_range()
    assert span is not None
    report = gather(ledger, span[0], span[1] + timedelta(days=1), currency="USD", rate="on_demand")
    assert ledger.totals("USD") == pytest.approx((report.waste_cost, report.saved_cost))
    assert ledger.totals("USD") == pytest.approx((14.25, 12.25))
    assert ledger.totals("EUR") == (100.0, 0.0)
    # Per day, as the report's daily series give them (a day without rows has none here).
    week = gather(ledger, date(2025, 3, 4), date(2025, 3, 11), currency="USD", rate="on_demand")
    by_day = ledger.money_by_day(date(2025, 3, 4), date(2025, 3, 11), "USD")
    assert [by_day.get(d, (0.0, 0.0))[0] for d in week.days] == pytest.approx(week.daily_waste_cost)
    assert [by_day.get(d, (0.0, 0.0))[1] for d in week.days] == pytest.approx(week.daily_saved_cost)
    assert sorted(by_day) == ["2025-03-04", "2025-03-09"]
    assert ledger.money_by_day(date(2025, 3, 5), date(2025, 3, 9), "USD") == {}


def test_usage_sums_hours_and_keeps_the_largest_counts(state: StateStore) -> None:
    ledger = LedgerStore(state)
    k = UsageKey("2025-03-04", "job-1")
    ledger.add({}, {k: UsageAmounts("alice", "vision", 8, 8, 1.0, 0.25, 2)})
    ledger.add(
        {},
        {
            k: UsageAmounts("alice", "vision", 8, 6, 2.0, 1.0, 6),
            UsageKey("2025-03-05", "job-1"): UsageAmounts("alice", "vision", 8, 8, 1, 1, 0),
        },
    )
    rows = ledger.usage(date(2025, 3, 4), date(2025, 3, 5))
    assert [(r.key, r.amounts) for r in rows] == [(k, UsageAmounts("alice", "vision", 8, 8, 3.0, 1.25, 6))]
    assert len(ledger.usage(date(2025, 3, 1), date(2025, 3, 9), team="vision")) == 2
    assert ledger.usage(date(2025, 3, 1), date(2025, 3, 9), team="nlp") == []
    ledger.add({}, {UsageKey("2025-03-04", "job-2"): UsageAmounts("bob", "nlp", 1, 1, 0.5, 0.5, 0)})
    # Per day, summed over workloads in SQL: what the rows' hours add up to.
    assert ledger.use_by_day(date(2025, 3, 1), date(2025, 3, 9)) == {
        "2025-03-04": (3.5, 1.75),
        "2025-03-05": (1.0, 1.0),
    }
    assert ledger.use_by_day(date(2025, 3, 5), date(2025, 3, 6)) == {"2025-03-05": (1.0, 1.0)}


def test_marks_are_saved_replaced_and_dropped(state: StateStore) -> None:
    ledger = LedgerStore(state)
    assert ledger.marks() == {}
    ledger.add(
        {}, {}, [Mark("waste:GPU-0", T0), Mark("saved:job-1:1", T0, {"gpus": 2, "ends": T0.isoformat()})]
    )
    ledger.add({}, {}, [Mark("waste:GPU-0", T0 + timedelta(minutes=5))], ["saved:job-1:1"])
    marks = ledger.marks()
    assert set(marks) == {"waste:GPU-0"}
    assert marks["waste:GPU-0"].until == T0 + timedelta(minutes=5)
    ledger.add({}, {}, [Mark("saved:job-2:1", T0, {"gpus": 4, "kw": None})])
    assert dict(ledger.marks()["saved:job-2:1"].data) == {"gpus": 4, "kw": None}
    ledger.add({}, {})  # nothing to do is fine


def _stop(
    state: StateStore,
    wid: str,
    team: str,
    at: datetime,
    *,
    level: Level,
    status: ActionStatus,
    dry_run: bool = False,
) -> None:
    w = Workload(
        wid, WorkloadKind.JOB, wid, Owner(f"u-{wid}", team), 2, ("g0", "g1"), at - timedelta(hours=1)
    )
    state.remember_workloads([w], at)
    d = Decision(
        wid,
        at,
        level,
        "graceful-stop",
        "why",
        rule="idle-allocation",
        gpu_uuids=w.gpu_uuids,
        idempotency_key=f"{wid}:{level}",
    )
    action = state.plan_action(d, dry_run=dry_run, at=at)
    assert action is not None
    if status is ActionStatus.SKIPPED:
        state.finish_action(action.id, status, "dry", at)
        return
    state.start_action(action.id, at)
    state.finish_action(action.id, status, "done", at)


def test_stops_and_actions_by_level_read_the_actions_table(state: StateStore) -> None:
    _stop(state, "a", "vision", T0, level=Level.GRACEFUL_STOP, status=ActionStatus.SUCCEEDED)
    _stop(state, "b", "nlp", T0 + timedelta(hours=1), level=Level.FORCE, status=ActionStatus.SUCCEEDED)
    _stop(state, "c", "nlp", T0, level=Level.GRACEFUL_STOP, status=ActionStatus.FAILED)
    _stop(state, "d", "nlp", T0, level=Level.NOTIFY, status=ActionStatus.SUCCEEDED)
    _stop(state, "e", "nlp", T0, level=Level.GRACEFUL_STOP, status=ActionStatus.SKIPPED, dry_run=True)
    _stop(state, "f", "nlp", T0 - timedelta(days=2), level=Level.GRACEFUL_STOP, status=ActionStatus.SUCCEEDED)
    ledger = LedgerStore(state)
    day, next_day = T0.replace(hour=0), T0.replace(hour=0) + timedelta(days=1)
    stops = ledger.stops(day, next_day)
    assert [(s.workload_id, s.level, s.user, s.team, s.gpus) for s in stops] == [
        ("a", Level.GRACEFUL_STOP, "u-a", "vision", 2),
        ("b", Level.FORCE, "u-b", "nlp", 2),
    ]
    assert [s.workload_id for s in ledger.stops(day, next_day, team="nlp")] == ["b"]
    # Failed ones count as actions taken; dry-run and skipped ones do not.
    assert ledger.actions_by_level(day, next_day) == {"L1": 1, "L2": 2, "L3": 1, "L4": 0}
    assert ledger.actions_by_level(day, next_day, team="vision") == {"L1": 0, "L2": 1, "L3": 0, "L4": 0}


def test_day_key() -> None:
    assert day_key(date(2025, 3, 4)) == "2025-03-04"
    assert day_key(datetime(2025, 3, 4, 23, 59, tzinfo=UTC)) == "2025-03-04"
