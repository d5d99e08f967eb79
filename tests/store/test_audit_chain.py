"""The audit log's hash chain, on SQLite and PostgreSQL: intact, changed, deleted, inserted, forked."""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, insert, select, update

from gpusteward.domain.errors import StoreError
from gpusteward.store import audit_chain
from gpusteward.store.db import StateStore
from gpusteward.store.dbschema import audit_t

T0 = datetime(2025, 3, 4, 10, 0, tzinfo=UTC)


def fill(store: StateStore, n: int = 6) -> None:
    for i in range(n):
        store.audit(
            "action.start", T0 + timedelta(seconds=i), f"job-{i}", key=f"k{i}", gpus=[i, 0.5], note=None
        )


def verify(store: StateStore, **kw):
    with store.transaction("verify") as conn:
        return audit_chain.verify(conn, **kw)


def test_every_record_is_chained_and_verifies(store: StateStore) -> None:
    fill(store)
    store.set_paused(True, by="ops", reason="maintenance", at=T0 + timedelta(minutes=1))
    report = verify(store)
    assert report.ok, report.problem
    assert (report.records, report.unchained, report.head_seq) == (7, 0, 7)
    with store.transaction("read") as conn:
        rows = conn.execute(select(audit_t).order_by(audit_t.c.id)).all()
    assert [r.seq for r in rows] == list(range(1, 8))
    assert rows[0].prev_hash == audit_chain.GENESIS
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(rows))
    assert report.head_hash == rows[-1].hash
    assert verify(store, expect_hash=rows[3].hash).ok


def test_a_changed_record_is_named(store: StateStore) -> None:
    fill(store)
    with store.transaction("tamper") as conn:
        conn.execute(update(audit_t).where(audit_t.c.seq == 3).values(payload={"key": "k2", "gpus": [9]}))
    report = verify(store)
    assert not report.ok
    assert "seq 3" in report.problem
    assert "content was changed" in report.problem


def test_a_deleted_record_is_found_at_the_next_one(store: StateStore) -> None:
    fill(store)
    with store.transaction("tamper") as conn:
        conn.execute(delete(audit_t).where(audit_t.c.seq == 4))
    report = verify(store)
    assert not report.ok
    assert "seq 5" in report.problem
    assert "seq 4 missing" in report.problem


def test_a_record_put_in_place_of_another_is_found_even_with_a_valid_hash(store: StateStore) -> None:
    fill(store)
    with store.transaction("tamper") as conn:
        rows = conn.execute(select(audit_t).order_by(audit_t.c.id)).all()
        # A forger who knows the scheme swaps record 2 for one of their own, correctly hashed.
        conn.execute(delete(audit_t).where(audit_t.c.seq == 2))
        forged = audit_chain.record_hash(2, rows[0].hash, T0, "action.start", "job-x", {"key": "forged"})
        values = {"event": "action.start", "workload_id": "job-x", "payload": {"key": "forged"}}
        conn.execute(
            insert(audit_t).values(id=rows[1].id, at=T0, seq=2, prev_hash=rows[0].hash, hash=forged, **values)
        )
    report = verify(store)
    assert not report.ok
    assert report.problem_id == rows[2].id
    assert "does not follow the record before it" in report.problem


def test_a_second_record_at_the_same_place_is_refused(store: StateStore) -> None:
    fill(store, 3)
    with store.transaction("read") as conn:
        head = conn.execute(select(audit_t).order_by(audit_t.c.id.desc()).limit(1)).one()
    # The unique seq: a chain cannot fork.
    values = {"at": T0, "event": "x", "workload_id": None, "payload": {}, "prev_hash": "0", "hash": "1"}
    with pytest.raises(StoreError, match=r"(?i)unique|duplicate"), store.transaction("fork") as conn:
        conn.execute(insert(audit_t).values(seq=head.seq, **values))
    assert verify(store).ok


def test_losing_the_newest_records_shows_against_a_noted_head(store: StateStore) -> None:
    fill(store)
    noted = verify(store).head_hash
    with store.transaction("tamper") as conn:
        conn.execute(delete(audit_t).where(audit_t.c.seq >= 5))
    assert verify(store).ok  # the chain that is left is consistent…
    report = verify(store, expect_hash=noted)  # …but the head an auditor noted is gone
    assert not report.ok
    assert report.found_expected is False


def test_concurrent_writers_never_fork_the_chain(store: StateStore) -> None:
    # Two stores on one database (two replicas, or the web app beside the loop) appending at once.
    other = StateStore(store.url if "sqlite" in store.url else store._engine.url.render_as_string(False))
    errors: list[BaseException] = []

    def write(s: StateStore, tag: str) -> None:
        for i in range(25):
            try:
                s.audit("test.write", T0 + timedelta(seconds=i), tag, i=i)
            except Exception as e:  # SQLite may refuse a writer with a stale snapshot: never fork
                errors.append(e)

    threads = [threading.Thread(target=write, args=(s, t)) for s, t in ((store, "a"), (other, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.close()
    report = verify(store)
    assert report.ok, report.problem
    assert report.records == 50 - len(errors)
    assert report.head_seq == report.records
