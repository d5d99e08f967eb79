"""The ledger's marks saved with one compiled upsert: any sequence of saves and drops leaves
SQLite and PostgreSQL holding what the in-memory ledger (the port's meaning: a drop, then the
saves) holds, times and data included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete

from gpusteward.store.db import StateStore
from gpusteward.store.dbschema import ledger_marks_t
from gpusteward.store.ledger import LedgerStore, Mark
from gpusteward.store.memory import MemoryLedger

T0 = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
KEYS = ("waste:g1", "waste:g2", "saved:w1:1")
times = st.builds(
    lambda s, hours: (T0 + timedelta(seconds=s, microseconds=s)).astimezone(timezone(timedelta(hours=hours))),
    st.integers(0, 3),
    st.sampled_from([0, 8]),
)
marks = st.builds(
    Mark,
    st.sampled_from(KEYS),
    times,
    st.sampled_from([{}, {"ends": "2026-12-05T09:00:00+00:00", "gpus": 2}, {"kw": None, "price": 1.5}]),
)
#: One ``add``: marks saved (one per key) and keys dropped.
calls = st.tuples(
    st.lists(marks, max_size=3, unique_by=lambda m: m.key), st.lists(st.sampled_from(KEYS), max_size=2)
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(calls, min_size=1, max_size=5))
def test_saves_and_drops_leave_what_the_memory_ledger_leaves(
    store: StateStore, steps: list[tuple[list[Mark], list[str]]]
) -> None:
    with store.transaction("start empty") as conn:
        conn.execute(delete(ledger_marks_t))
    ledger, model = LedgerStore(store), MemoryLedger()
    for saved, dropped in steps:
        ledger.add({}, {}, saved, dropped)
        model.add({}, {}, saved, dropped)
        assert ledger.marks() == model.marks()
