"""Saving ladders with one compiled upsert (``store/ladders.py``): any sequence of saves and
clears leaves the SQL store (SQLite, PostgreSQL) holding exactly what the in-memory store, whose
delete-then-insert rules are the port's meaning, holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusteward.domain.models import LadderState
from gpusteward.store.db import StateStore
from gpusteward.store.memory import MemoryStore

T0 = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
IDS = ("w1", "w2", "w3", "w4")
#: Times as sources give them: a few shared instants, in UTC and in other zones.
times = st.builds(
    lambda minutes, hours: (T0 + timedelta(minutes=minutes, microseconds=minutes * 7)).astimezone(
        timezone(timedelta(hours=hours))
    ),
    st.integers(0, 5),
    st.sampled_from([0, 2, -5]),
)
states = st.builds(
    LadderState,
    workload_id=st.sampled_from(IDS),
    incarnation=st.sampled_from(["1", "2"]),
    rule=st.sampled_from(["idle", "zombie"]),
    first_seen_at=times,
    last_seen_at=times,
    step=st.sampled_from(["", "warn-1", "graceful-stop"]),
    step_at=st.none() | times,
    first_warned_at=st.none() | times,
    clean_since=st.none() | times,
)
#: One ``update_ladders`` call: ladders saved (one per workload, as ``decide`` gives them),
#: workloads cleared, the mode.
calls = st.tuples(
    st.lists(states, max_size=4, unique_by=lambda s: s.workload_id),
    st.lists(st.sampled_from(IDS), max_size=3),
    st.booleans(),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(calls, min_size=1, max_size=6))
def test_saves_and_clears_leave_what_the_memory_store_leaves(
    store: StateStore, steps: list[tuple[list[LadderState], list[str], bool]]
) -> None:
    for mode in (False, True):  # each example starts from no ladders
        store.update_ladders((), IDS, dry_run=mode)
    model = MemoryStore()
    for saved, cleared, mode in steps:
        store.update_ladders(saved, cleared, dry_run=mode)
        model.update_ladders(saved, cleared, dry_run=mode)
        for m in (False, True):
            mine = store.load_ladders(m)  # from memory once the store wrote (store/ladders.py)
            assert mine == model.load_ladders(m)
            assert list(mine) == sorted(mine)  # in workload order, as the table gives them
            # In UTC, as read back from the table: a reason quoting a time prints the same.
            assert all(t is None or t.tzinfo is UTC for s in mine.values() for t in _times(s))
    store.flush_kept()  # the loop stops: another process then reads them all
    other = StateStore(store._engine.url.render_as_string(hide_password=False))
    for m in (False, True):
        assert other.load_ladders(m) == model.load_ladders(m)
    other.close()


def _times(s: LadderState) -> list[datetime | None]:
    return [s.first_seen_at, s.last_seen_at, s.step_at, s.first_warned_at, s.clean_since]


def test_a_workload_both_saved_and_cleared_keeps_the_saved_ladder(store: StateStore) -> None:
    kept = LadderState("w1", "1", "idle", T0, T0 + timedelta(minutes=1), "warn-1", T0)
    store.update_ladders([LadderState("w2", "1", "idle", T0, T0)], (), dry_run=False)
    store.update_ladders([kept], ["w1", "w2"], dry_run=False)
    assert store.load_ladders(False) == {"w1": kept}
