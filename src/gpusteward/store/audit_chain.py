"""The tamper-evident audit log: every record carries a SHA-256 over its content and the
previous record's hash, so changing, inserting or deleting a record breaks the chain after it.

Appends are serialised so that two writers can never fork the chain: on PostgreSQL by a
transaction-level advisory lock taken before the chain head is read; on SQLite by its single
writer (a transaction whose snapshot is stale cannot write); on both, ``seq`` is unique.

What the chain cannot show by itself is the loss of the *newest* records: ``verify`` reports the
head (seq and hash) for an auditor to note, and ``expect_hash`` checks a noted record is still
there. Nor can it show a record never written: ``verify`` also checks every action state has its
record (``store.audit_complete``). Records written before the chain existed (no hash) are counted
as unchained.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select, text, update
from sqlalchemy.engine import Connection

from gpusteward.domain.records import jsonable
from gpusteward.store import audit_complete
from gpusteward.store.dbschema import audit_t

GENESIS = "0" * 64
#: pg_advisory_xact_lock key of the audit chain ("gpusteward audit" as a number).
_CHAIN_LOCK = 0x67707573_61756474
_BATCH = 1000


def _time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")


def record_hash(
    seq: int, prev_hash: str, at: datetime, event: str, workload_id: str | None, payload: Any
) -> str:
    """SHA-256 (hex) of the record's canonical JSON, which includes the previous hash."""
    content = {
        "seq": seq,
        "prev": prev_hash,
        "at": _time(at),
        "event": event,
        "workload_id": workload_id,
        "payload": payload,
    }
    blob = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def _head(conn: Connection) -> tuple[int, str]:
    c = audit_t.c
    row = conn.execute(
        select(c.seq, c.hash).where(c.hash.is_not(None)).order_by(c.id.desc()).limit(1)
    ).first()
    return (0, GENESIS) if row is None else (int(row.seq), str(row.hash))


def _lock(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _CHAIN_LOCK})


def append(
    conn: Connection, at: datetime, event: str, workload_id: str | None, payload: dict[str, Any]
) -> None:
    """Append one chained record inside the caller's transaction."""
    _lock(conn)
    seq, prev = _head(conn)
    data = jsonable(payload)
    digest = record_hash(seq + 1, prev, at, event, workload_id, data)
    values = {
        "at": at,
        "event": event,
        "workload_id": workload_id,
        "payload": data,
        "seq": seq + 1,
        "prev_hash": prev,
        "hash": digest,
    }
    conn.execute(insert(audit_t).values(values))


def chain_unchained(conn: Connection) -> int:
    """Give records written before the chain existed their place in it (oldest first); returns
    how many. Used once, when an old database is adopted by the migrations."""
    _lock(conn)
    c = audit_t.c
    if conn.execute(select(c.id).where(c.hash.is_not(None)).limit(1)).first() is not None:
        return 0  # a chain exists: records without a hash after it are evidence, left alone
    prev = GENESIS
    rows = conn.execute(select(audit_t).where(c.hash.is_(None)).order_by(c.id)).all()
    for seq, r in enumerate(rows, start=1):
        digest = record_hash(seq, prev, r.at, r.event, r.workload_id, r.payload)
        conn.execute(update(audit_t).where(c.id == r.id).values(seq=seq, prev_hash=prev, hash=digest))
        prev = digest
    return len(rows)


@dataclass
class ChainReport:
    """What ``verify`` found. ``ok`` is False from the first problem on."""

    records: int = 0
    unchained: int = 0
    head_seq: int = 0
    head_hash: str = GENESIS
    ok: bool = True
    #: The first problem: the record (by id and seq) and what is wrong with it.
    problem: str = ""
    problem_id: int | None = None
    problems: int = 0
    found_expected: bool | None = None
    #: Actions whose state has no audit record, and the first of them.
    incomplete: int = 0
    missing: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "records": self.records,
            "unchained": self.unchained,
            "head_seq": self.head_seq,
            "head_hash": self.head_hash,
            "problem": self.problem,
            "problem_id": self.problem_id,
            "problems": self.problems,
            "found_expected": self.found_expected,
            "incomplete": self.incomplete,
            "missing": self.missing,
        }


def _rows(conn: Connection) -> Iterator[Any]:
    c = audit_t.c
    last = 0
    while True:
        batch = conn.execute(select(audit_t).where(c.id > last).order_by(c.id).limit(_BATCH)).all()
        if not batch:
            return
        yield from batch
        last = batch[-1].id


def verify(conn: Connection, *, expect_hash: str | None = None) -> ChainReport:
    """Walk the chain from its start; report the first record changed, inserted or deleted, and
    the actions whose state has no record."""
    report = ChainReport()
    counts: Counter[tuple[str, str]] = Counter()
    prev_seq, prev_hash = 0, GENESIS
    chained = False

    def broken(r: Any, what: str) -> None:
        report.problems += 1
        if report.ok:
            report.ok = False
            report.problem_id = r.id
            report.problem = f"record id {r.id} (seq {r.seq}, {r.event}, {_time(r.at)}): {what}"

    for r in _rows(conn):
        report.records += 1
        audit_complete.tally(counts, r.event, r.payload)
        if r.hash is None:
            if chained:
                broken(r, "has no hash inside the chain: inserted afterwards, or its hash removed")
            else:
                report.unchained += 1
            continue
        chained = True
        if expect_hash is not None and r.hash == expect_hash:
            report.found_expected = True
        digest = record_hash(r.seq, r.prev_hash or "", r.at, r.event, r.workload_id, r.payload)
        if digest != r.hash:
            broken(r, "its content was changed (its hash does not match it)")
        elif r.prev_hash != prev_hash:
            if r.seq is not None and r.seq > prev_seq + 1:
                gone = (
                    f"seq {prev_seq + 1}" if r.seq == prev_seq + 2 else f"seq {prev_seq + 1} to {r.seq - 1}"
                )
                broken(r, f"the record(s) before it were deleted ({gone} missing)")
            elif r.seq is not None and r.seq <= prev_seq:
                broken(r, f"it was inserted (seq {r.seq} repeats or goes back after {prev_seq})")
            else:
                broken(
                    r, "it does not follow the record before it: that one was changed, or a record deleted"
                )
        elif r.seq != prev_seq + 1:
            broken(r, f"out of sequence (seq {r.seq} after {prev_seq})")
        prev_seq, prev_hash = int(r.seq or 0), str(r.hash)
    report.head_seq, report.head_hash = prev_seq, prev_hash
    if expect_hash is not None and not report.found_expected:
        report.found_expected = False
        if report.ok:
            report.ok = False
            report.problem = (
                f"the record with hash {expect_hash} is not in the chain: newer records were deleted"
            )
    report.incomplete, report.missing = audit_complete.missing(conn, counts)
    if report.incomplete:
        report.problems += report.incomplete
        if report.ok:
            report.ok = False
            report.problem = f"the log is incomplete: {report.missing}"
    return report


def export_rows(conn: Connection) -> Iterator[dict[str, Any]]:
    """Every audit record as plain data, oldest first, for auditors."""
    for r in _rows(conn):
        yield {
            "id": r.id,
            "seq": r.seq,
            "at": r.at.astimezone(UTC).isoformat(),
            "event": r.event,
            "workload_id": r.workload_id,
            "payload": r.payload,
            "prev_hash": r.prev_hash,
            "hash": r.hash,
        }
