"""The leader keeps each workload's last decision signature: a ladder waiting tick after tick is
stored once, without a read of the table each tick, and what another leader stored is read again
once this store forgets (``reread``: leadership changed hands, or a transaction failed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from gpusteward.domain.models import Decision, Hold, Level
from gpusteward.store.db import StateStore
from gpusteward.store.dbschema import decisions_t

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def _decision(minute: int, hold: Hold, wid: str = "ns/train") -> Decision:
    return Decision(wid, T0 + timedelta(minutes=minute), Level.NOTIFY, "warn-1", f"tick {minute}", hold)


def _rows(store: StateStore) -> int:
    with store._engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(decisions_t)).scalar_one())


def test_a_waiting_decision_is_stored_once_and_another_leaders_is_read_after_a_reread(db_url: str) -> None:
    a, b = StateStore(db_url), StateStore(db_url)
    a.create_schema()
    try:
        assert a.record_decisions([_decision(0, Hold.NONE), _decision(0, Hold.WAITING, "ns/other")]) == 2
        assert a.record_decisions([_decision(1, Hold.NONE), _decision(1, Hold.WAITING, "ns/other")]) == 0
        # Another replica led meanwhile: it reads what a stored, then stores its own.
        assert b.record_decisions([_decision(2, Hold.NONE)]) == 0
        assert b.record_decisions([_decision(3, Hold.WAITING)]) == 1
        a.reread()  # a leads again
        assert a.record_decisions([_decision(4, Hold.WAITING)]) == 0  # b's is the last stored
        assert a.record_decisions([_decision(5, Hold.NONE)]) == 1
        assert _rows(a) == 4
    finally:
        a.close()
        b.close()
