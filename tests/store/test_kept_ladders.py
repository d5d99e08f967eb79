"""The ladders the leader's store keeps in memory (``store/ladders.py``; that the leader reads
what a store writing everything holds is ``test_ladders.py``'s): another reader of the database
sees every change but ``last_seen_at`` at once, and that within ``SEEN_EVERY``; the loop's stop
writes it; another leader's writes and a failed write are read again."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event

from gpusteward.domain.errors import StoreError
from gpusteward.domain.models import LadderState
from gpusteward.store.db import SEEN_EVERY, StateStore

T0 = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
TICK = timedelta(seconds=30)


def test_a_waiting_ladder_is_written_every_seen_every_and_a_step_at_once(db_url: str) -> None:
    leader, reader = StateStore(db_url), StateStore(db_url)
    leader.create_schema()
    state = LadderState("w1", "1", "idle", T0, T0)
    ticks = int(SEEN_EVERY / TICK)
    for k in range(ticks):
        state = replace(state, last_seen_at=T0 + k * TICK)
        leader.update_ladders([state], (), dry_run=False)
        assert leader.load_ladders(False) == {"w1": state}
    assert reader.load_ladders(False)["w1"].last_seen_at == T0
    stepped = replace(state, step="warn-1", step_at=state.last_seen_at)
    leader.update_ladders([stepped], (), dry_run=False)
    assert reader.load_ladders(False) == {"w1": stepped}  # a step is written at once
    later = replace(stepped, last_seen_at=T0 + SEEN_EVERY + ticks * TICK)
    leader.update_ladders([replace(stepped, last_seen_at=T0 + ticks * TICK)], (), dry_run=False)
    assert reader.load_ladders(False)["w1"].last_seen_at == stepped.last_seen_at
    leader.flush_kept()  # the loop stops
    assert reader.load_ladders(False)["w1"].last_seen_at == T0 + ticks * TICK
    leader.update_ladders([later], (), dry_run=False)  # SEEN_EVERY after the last write
    assert reader.load_ladders(False) == {"w1": later}
    leader.update_ladders([], ["w1"], dry_run=False)
    assert reader.load_ladders(False) == leader.load_ladders(False) == {}
    leader.close()
    reader.close()


def test_another_leader_and_a_failed_write_are_read_again(db_url: str) -> None:
    a, b = StateStore(db_url), StateStore(db_url)
    a.create_schema()
    mine = LadderState("w1", "1", "idle", T0, T0)
    a.update_ladders([mine], (), dry_run=False)
    assert a.load_ladders(False) == {"w1": mine}  # from memory from now on
    theirs = replace(mine, step="warn-1", step_at=T0 + TICK, last_seen_at=T0 + TICK)
    b.update_ladders([theirs], (), dry_run=False)  # b led meanwhile
    assert a.load_ladders(False) == {"w1": mine}
    a.reread()  # a leads again
    assert a.load_ladders(False) == {"w1": theirs}

    def refuse(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "ladders" in statement and statement.lstrip().upper().startswith("INSERT"):
            raise RuntimeError("disk full")

    a.update_ladders([theirs], (), dry_run=False)  # this store writes: memory from now on
    event.listen(a._engine, "before_cursor_execute", refuse)
    with pytest.raises((StoreError, RuntimeError)):
        a.update_ladders([replace(theirs, step="graceful-stop")], (), dry_run=False)
    event.remove(a._engine, "before_cursor_execute", refuse)
    assert a.load_ladders(False) == {"w1": theirs}  # the table's, not the write rolled back
    a.close()
    b.close()
