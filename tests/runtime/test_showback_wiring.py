"""The agent runs the showback step: a simulated cluster through the real tick on SQLite writes
showback rows, tells a team whose budget it crossed (once), and closes the month when due."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

from gpusteward.integrations.sim import SimClock
from gpusteward.notify.basic import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings

START = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)


def test_the_tick_records_showback_alerts_budgets_and_closes_the_month(tmp_path: Path) -> None:
    settings = load_settings(
        None,
        mode="dry-run",
        tick_seconds=60,
        source={"name": "sim", "sim": {"scenario": "small", "history_hours": 0}},
        store={"url": f"sqlite:///{tmp_path / 'state.db'}"},
        showback={"close_after_days": 0},
        budgets={"teams": {"nlp": {"amount": 0.05}}, "check_every_minutes": 5},
    )
    clock, notifier = SimClock(START), MemoryNotifier()
    steward, _ = build_steward(settings, clock=clock, notifier=notifier)
    for _ in range(150):  # 22:00 to 00:30: over midnight into December
        steward.tick()
        clock.advance(60)
    store = steward.store
    nov = store.ledger.showback(date(2026, 11, 1), date(2026, 12, 1))
    assert {r.key.team for r in nov} >= {"nlp", ""}
    assert sum(r.amounts.held_gpu_hours for r in nov) > 0
    alerts = [n for n in notifier.sent if n.workload_id == "budget:nlp"]
    # November's budget crossed (told once, the highest share), then December's after midnight.
    assert [n.dedup_key for n in alerts] == ["budget:nlp:2026-11:1", "budget:nlp:2026-12:1"]
    assert "2026-11" in store.ledger.closed_months()
