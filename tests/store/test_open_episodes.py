"""The open finding episodes the leader keeps in memory (``store/episodes.py``): the leader reads
the newest refresh at once, another reader of the database within ``SEEN_EVERY``; ending an
episode or stopping the loop writes its last refresh; a restart and another leader read the
table again; and over any ticks the leader's answers are those of a store writing every tick."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import event

from gpusteward.domain.errors import StoreError
from gpusteward.domain.models import Finding, RuleAction
from gpusteward.domain.records import FindingEpisode
from gpusteward.store.db import SEEN_EVERY, StateStore
from gpusteward.store.memory import MemoryStore

T0 = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
TICK = timedelta(seconds=30)


def finding(
    wid: str | None = "job-1", rule: str = "idle-gpu", util: float = 1.0, minutes: float = 30
) -> Finding:
    return Finding(
        rule=rule,
        kind="idle",
        action=RuleAction.RECLAIM,
        at=T0,
        gpu_uuids=("GPU-0",) if wid is None else (f"GPU-{wid}",),
        workload_id=wid,
        evidence={"max(gpu_util_pct)": {"GPU-0": util}, "mean(power_w)": {"GPU-0": math.inf}},
        wasted_minutes=minutes,
        wasted_gpu_hours=minutes / 60,
        wasted_cost=minutes / 60 * 4.0,
        message=f"idle at {util:g} %",
    )


@pytest.fixture
def pair(db_url: str) -> Iterator[tuple[StateStore, StateStore]]:
    """The leader's store, and another process' view of the same database (the web, a CLI)."""
    leader = StateStore(db_url)
    leader.create_schema()
    reader = StateStore(db_url)
    yield leader, reader
    leader.close()
    reader.close()


def _util(ep: FindingEpisode) -> float:
    return ep.finding.evidence["max(gpu_util_pct)"]["GPU-0"]


def test_the_leader_reads_every_refresh_another_reader_one_within_seen_every(
    pair: tuple[StateStore, StateStore],
) -> None:
    leader, reader = pair
    ticks = int(SEEN_EVERY / TICK)
    for k in range(ticks):
        leader.record_findings([finding(util=float(k))], T0 + k * TICK)
    (mine,) = leader.findings_for("job-1")
    (theirs,) = reader.findings_for("job-1")
    last = T0 + (ticks - 1) * TICK
    assert (mine.last_seen_at, _util(mine), mine.finding.wasted_minutes) == (last, ticks - 1, 30 + 4.5)
    assert math.isnan(mine.finding.evidence["mean(power_w)"]["GPU-0"])  # as the table gives it back
    assert (theirs.last_seen_at, _util(theirs), theirs.finding.wasted_minutes) == (T0, 0.0, 30)
    leader.record_findings([finding(util=99.0)], T0 + ticks * TICK)  # SEEN_EVERY after the write
    (theirs,) = reader.findings_for("job-1")
    assert (theirs.last_seen_at, _util(theirs), theirs.finding.wasted_minutes) == (T0 + SEEN_EVERY, 99.0, 35)
    assert theirs == leader.findings_for("job-1")[0]


def test_an_episode_ends_and_the_loop_stops_with_its_last_refresh_written(
    pair: tuple[StateStore, StateStore],
) -> None:
    leader, reader = pair
    for k in range(3):
        leader.record_findings([finding(util=float(k)), finding("job-2", util=float(k))], T0 + k * TICK)
    leader.close_findings([("job-1", "idle-gpu")], T0 + 3 * TICK)
    ended, still = reader.findings_for("job-1")[0], reader.findings_for("job-2")[0]
    assert (ended.ended_at, ended.last_seen_at, _util(ended), ended.finding.wasted_minutes) == (
        T0 + 3 * TICK,
        T0 + 2 * TICK,
        2.0,
        31.0,
    )
    assert (still.last_seen_at, _util(still)) == (T0, 0.0)
    assert leader.open_episode_keys() == reader.open_episode_keys() == {("job-2", "idle-gpu")}
    leader.flush_kept()
    assert reader.findings_for("job-2") == leader.findings_for("job-2")
    assert reader.findings_for("job-2")[0].last_seen_at == T0 + 2 * TICK


def test_a_restart_goes_on_from_the_last_refresh_written_and_never_counts_less(db_url: str) -> None:
    first = StateStore(db_url)
    first.create_schema()
    for k in range(4):  # written at T0 only: the crash loses three refreshes
        first.record_findings([finding()], T0 + k * TICK)
    first.close()  # no flush: a crash
    again = StateStore(db_url)
    again.record_findings([finding()], T0 + 4 * TICK)
    (ep,) = again.findings_for("job-1")
    # The stored 30 minutes at T0, plus the 2 minutes since: as if every tick had been written.
    assert (ep.first_seen_at, ep.last_seen_at, ep.finding.wasted_minutes) == (T0, T0 + 4 * TICK, 32.0)
    again.close()


def test_a_new_leader_reads_what_the_other_replica_wrote(db_url: str) -> None:
    a, b = StateStore(db_url), StateStore(db_url)
    a.create_schema()
    a.record_findings([finding()], T0)
    b.close_findings([("job-1", "idle-gpu")], T0 + TICK)  # b led meanwhile, and the waste ended
    b.record_findings([finding()], T0 + 2 * TICK)  # then came back: a new episode
    a.reread()  # a leads again
    a.record_findings([finding(util=7.0)], T0 + 12 * TICK)
    old, new = a.findings_for("job-1")
    assert (old.ended_at, old.last_seen_at, _util(old)) == (T0 + TICK, T0, 1.0)
    assert (new.first_seen_at, new.last_seen_at, _util(new)) == (T0 + 2 * TICK, T0 + 12 * TICK, 7.0)
    assert b.findings_for("job-1") == [old, new]  # written: SEEN_EVERY after b's write
    a.close()
    b.close()


def test_a_write_rolled_back_is_read_again(pair: tuple[StateStore, StateStore]) -> None:
    leader, _ = pair
    leader.record_findings([finding()], T0)
    fail = {"on": True}

    def refuse(conn: object, cursor: object, statement: str, *args: object) -> None:
        if fail["on"] and statement.lstrip().upper().startswith("INSERT"):
            raise RuntimeError("disk full")

    event.listen(leader._engine, "before_cursor_execute", refuse)
    with pytest.raises((StoreError, RuntimeError)):  # job-1 refreshed in memory, job-2 not inserted
        leader.record_findings([finding(util=5.0, minutes=40), finding("job-2")], T0 + SEEN_EVERY)
    fail["on"] = False
    leader.record_findings([finding(util=6.0)], T0 + SEEN_EVERY + TICK)
    (ep,) = leader.findings_for("job-1")
    # From the table's T0 row, not the refresh rolled back (40 minutes at T0 + SEEN_EVERY).
    assert ep.finding.wasted_minutes == 30 + 5.5
    assert leader.open_episode_keys() == {("job-1", "idle-gpu")}


_ops = st.lists(
    st.tuples(
        st.sets(st.sampled_from(["job-1", "job-2", "job-3", None])),  # who is found
        st.sets(st.sampled_from(["job-1", "job-2", "job-3"])),  # whose episode ends
        st.integers(1, 12),  # ticks to the next
        st.floats(0, 60),  # the findings' own minutes
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(_ops)
def test_the_leader_answers_as_a_store_writing_every_tick(
    ops: list[tuple[set[str | None], set[str], int, float]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'state.db'}"
        db, reference = StateStore(url), MemoryStore()
        db.create_schema()
        at = T0
        try:
            for k, (found, ending, gap, minutes) in enumerate(ops):
                findings = [finding(w, util=float(k), minutes=minutes) for w in sorted(found, key=str)]
                for s in (db, reference):
                    s.record_findings(findings, at)
                    s.close_findings([(w, "idle-gpu") for w in ending - found], at)
                assert db.open_episode_keys() == reference.open_episode_keys()
                assert _plain(db.all_findings()) == _plain(reference.all_findings())
                at += gap * TICK
            db.flush_kept()
            other = StateStore(url)  # what another process reads once the loop stopped
            assert _plain(other.all_findings()) == _plain(reference.all_findings())
            other.close()
        finally:
            db.close()


def _plain(episodes: list[FindingEpisode]) -> list[tuple[object, ...]]:
    """What a reader sees of each episode (NaN made comparable)."""
    return [
        (
            e.finding.workload_id,
            e.finding.gpu_uuids,
            e.first_seen_at,
            e.last_seen_at,
            e.ended_at,
            e.finding.message,
            round(e.finding.wasted_minutes, 9),
            round(e.finding.wasted_cost, 9),
            {k: {u: repr(v) for u, v in vs.items()} for k, vs in e.finding.evidence.items()},
        )
        for e in episodes
    ]
