"""Durable state in SQL: pause flag, ladders, finding episodes, decisions, actions, notices,
the append-only audit log and workload snapshots (schema in ``dbschema``).

SQLite by default, PostgreSQL-compatible (dialect-specific only in the upserts a tick runs over
thousands of rows, ``store/bulk.py``'s). Each public method is one short transaction, batched
per tick; SQLAlchemy errors become ``StoreError`` with the cause.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Table, create_engine, event, func, insert, or_, select, update
from sqlalchemy.engine import Connection, Row, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import StaticPool

from gpusteward.domain import fastjson
from gpusteward.domain.errors import StoreError
from gpusteward.domain.models import Decision, Finding, LadderState, Notice, Workload
from gpusteward.domain.records import (
    ApprovalRecord,
    AuditNote,
    AuditRecord,
    FindingEpisode,
    NoticeRecord,
    PauseState,
    SnoozeRecord,
    WorkloadRecord,
)
from gpusteward.store import audit_chain, decided, episodes, ladders, schema, snapshots
from gpusteward.store.actions import ActionLog, inserted_id
from gpusteward.store.controls import OwnerControls
from gpusteward.store.dbschema import (
    audit_t,
    decisions_t,
    episodes_t,
    notices_t,
    settings_t,
    workloads_t,
)
from gpusteward.store.docs import SqlDocs
from gpusteward.store.ledger import LedgerStore
from gpusteward.store.queue_waits import SqlQueueWaits
from gpusteward.store.rows import (
    audit_of,
    decision_of,
    episode_of,
    notice_of,
    notice_row,
    workload_of,
)

__all__ = [
    "ApprovalRecord",
    "AuditNote",
    "AuditRecord",
    "FindingEpisode",
    "NoticeRecord",
    "PauseState",
    "SnoozeRecord",
    "StateStore",
    "WorkloadRecord",
]

#: A workload's ``last_seen_at`` lags the loop by at most this much (owner controls call a
#: workload finished after 15 minutes unseen: runtime.owner_controls.FINISHED_AFTER).
SEEN_EVERY = timedelta(minutes=5)


def _short(e: BaseException) -> str:
    # SQLAlchemy messages carry the statement and its parameters: keep the first line, cut.
    text = str(getattr(e, "orig", None) or e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets readers (web, CLI) run beside the writing loop; NORMAL sync is safe with WAL.
    for pragma in ("journal_mode=WAL", "busy_timeout=10000", "synchronous=NORMAL"):
        cur.execute(f"PRAGMA {pragma}")
    cur.close()


class StateStore(OwnerControls, ActionLog, SqlDocs, SqlQueueWaits):
    """gpusteward's durable state. One instance per process; safe to reopen on the same database.

    Approvals and snoozes come from ``store.controls.OwnerControls``, actions from
    ``store.actions.ActionLog``, queue waits from ``store.queue_waits.SqlQueueWaits``."""

    def __init__(self, url: str = "sqlite:///gpusteward.db") -> None:
        self._snapshots = snapshots.KeptSnapshots(SEEN_EVERY)  # the workloads as last written
        self._open = episodes.OpenEpisodes(SEEN_EVERY)  # the open finding episodes, as the leader
        self._ladders = ladders.KeptLadders(SEEN_EVERY)  # and the ladders it writes
        self._decided = decided.LastDecisions()  # and its decisions' last signatures
        try:
            parsed = make_url(url)
            # A JSON column or two a row read, thousands of evidence maps a tick written.
            kwargs: dict[str, Any] = {
                "json_deserializer": fastjson.loads,
                "json_serializer": fastjson.dumps_text,
            }
            sqlite = parsed.get_backend_name() == "sqlite"
            if sqlite and parsed.database in (None, "", ":memory:"):
                # One shared connection, or each checkout would see a different empty database.
                kwargs |= {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
            self._engine = create_engine(parsed, **kwargs)
            if sqlite:
                event.listen(self._engine, "connect", _sqlite_pragmas)
        except (SQLAlchemyError, ValueError, ImportError) as e:  # ImportError: driver not installed
            safe = url.split("@")[-1] if "@" in url else url
            raise StoreError(f"cannot open store {safe!r}: {_short(e)}") from e

    @contextmanager
    def _tx(self, what: str) -> Iterator[Connection]:
        try:
            with self._engine.begin() as conn:
                yield conn
        except BaseException as e:
            self.reread()  # a write rolled back: what is kept in memory may be ahead of the table
            if isinstance(e, SQLAlchemyError):
                raise StoreError(f"{what}: {_short(e)}") from e
            raise

    def transaction(self, what: str) -> AbstractContextManager[Connection]:
        """One transaction on the store's engine, for store modules beside this one (web access).
        ``what`` names it in the ``StoreError`` raised on failure."""
        return self._tx(what)

    @property
    def url(self) -> str:
        """The database URL with any password masked, for logs and messages."""
        return self._engine.url.render_as_string(hide_password=True)

    def create_schema(self) -> None:
        """Migrate the database to the newest schema (Alembic; ``store.schema``)."""
        try:
            schema.upgrade(self._engine)
        except SQLAlchemyError as e:
            raise StoreError(f"migrate schema: {_short(e)}") from e

    def close(self) -> None:
        self._engine.dispose()

    @property
    def ledger(self) -> LedgerStore:
        """The waste and savings ledger in this database."""
        return LedgerStore(self)

    # -- pause (the kill switch) --------------------------------------------------------------
    def pause_state(self) -> PauseState:
        with self._tx("read pause flag") as conn:
            value = conn.execute(select(settings_t.c.value).where(settings_t.c.key == "paused")).scalar()
        if not value:
            return PauseState(False)
        at = datetime.fromisoformat(value["at"]) if value.get("at") else None
        return PauseState(bool(value["paused"]), value.get("by", ""), value.get("reason", ""), at)

    def is_paused(self) -> bool:
        return self.pause_state().paused

    def set_paused(self, paused: bool, *, by: str, reason: str, at: datetime) -> None:
        value = {"paused": paused, "by": by, "reason": reason, "at": at.astimezone(UTC).isoformat()}
        with self._tx("set pause flag") as conn:
            done = conn.execute(update(settings_t).where(settings_t.c.key == "paused").values(value=value))
            if done.rowcount == 0:
                conn.execute(insert(settings_t).values(key="paused", value=value))
            event_ = "paused" if paused else "resumed"
            self._audit_in(conn, event_, at, None, {"by": by, "reason": reason})

    # -- ladders ------------------------------------------------------------------------------
    def load_ladders(self, dry_run: bool) -> dict[str, LadderState]:
        """The ladders of a mode; from memory once this store wrote them (``store/ladders.py``)."""
        with self._tx("load ladders") as conn:
            return self._ladders.load(conn, dry_run)

    def update_ladders(self, save: Iterable[LadderState], clear: Iterable[str], *, dry_run: bool) -> None:
        """Save some ladders and end others in one transaction (what ``decide`` returns each tick)."""
        states, cleared = list(save), list(clear)
        if not (states or cleared):
            return
        with self._tx("save ladders") as conn:
            self._ladders.update(conn, states, cleared, dry_run=dry_run)

    def save_ladders(self, states: Iterable[LadderState], dry_run: bool) -> None:
        self.update_ladders(states, (), dry_run=dry_run)

    def clear_ladders(self, ids: Iterable[str], dry_run: bool) -> None:
        self.update_ladders((), ids, dry_run=dry_run)

    # -- finding episodes ---------------------------------------------------------------------
    def record_findings(self, findings: Sequence[Finding], at: datetime) -> None:
        """Open an episode per new (workload, rule); refresh the open one with the latest evidence
        (written every ``SEEN_EVERY``: ``store/episodes.py``)."""
        if findings:
            with self._tx("record findings") as conn:
                self._open.record(conn, findings, at)

    def close_findings(self, keys: Iterable[tuple[str, str]], at: datetime) -> None:
        """End the open episodes of these (workload id, rule) pairs (waste gone or workload gone)."""
        with self._tx("close findings") as conn:
            self._open.close(conn, keys, at)

    def flush_kept(self) -> None:
        """Write what waits in memory: open episodes' refreshes, ladders' ``last_seen_at``."""
        with self._tx("write findings and ladders") as conn:
            self._open.flush(conn)
            self._ladders.flush(conn)

    def reread(self) -> None:
        """Forget what this replica keeps of open episodes, ladders and decisions: another may
        have led."""
        self._open.forget()
        self._ladders.forget()
        self._decided.forget()

    def findings_for(self, workload_id: str) -> list[FindingEpisode]:
        """Every episode of one workload, oldest first."""
        return self._episodes(episodes_t.c.workload_id == workload_id)

    def open_findings(self) -> list[FindingEpisode]:
        return self._episodes(episodes_t.c.ended_at.is_(None))

    def all_findings(self) -> list[FindingEpisode]:
        """Every episode ever recorded, oldest first (reports over a bounded run, like the demo)."""
        return self._episodes(episodes_t.c.id.is_not(None))

    def open_episode_keys(self) -> set[tuple[str, str]]:
        """(workload id, rule) of every open episode: the candidates for ``close_findings``."""
        with self._tx("read open findings") as conn:
            return self._open.keys(conn)

    def _episodes(self, where: Any) -> list[FindingEpisode]:
        """The episodes ``where`` selects, each open one with its newest refresh, written or not."""
        with self._tx("read findings") as conn:
            rows = conn.execute(select(episodes_t).where(where).order_by(episodes_t.c.id)).all()
        return self._open.newest([episode_of(r) for r in rows])

    # -- decisions ----------------------------------------------------------------------------
    def record_decisions(self, decisions: Sequence[Decision]) -> int:
        """Store those whose (level, step, hold) differs from the workload's last stored decision."""
        if not decisions:
            return 0
        with self._tx("record decisions") as conn:
            return self._decided.record(conn, decisions)

    def decisions_for(self, workload_id: str, limit: int = 100) -> list[Decision]:
        """The last ``limit`` stored decisions of one workload, oldest first."""
        return [decision_of(r) for r in self._last(decisions_t, limit, workload_id, "decisions")]

    # -- notices ------------------------------------------------------------------------------
    def record_notice(self, notice: Notice, *, sent: bool) -> int:
        with self._tx("record notice") as conn:
            return inserted_id(conn.execute(insert(notices_t).values(notice_row(notice, sent))))

    def notices(self, workload_id: str | None = None, limit: int = 100) -> list[NoticeRecord]:
        """The last ``limit`` notices (of one workload), oldest first."""
        return [notice_of(r) for r in self._last(notices_t, limit, workload_id, "notices")]

    def notices_since(self, at: datetime) -> list[NoticeRecord]:
        """Every notice recorded since ``at``, oldest first."""
        c = notices_t.c
        with self._tx("read notices") as conn:
            return [notice_of(r) for r in conn.execute(select(notices_t).where(c.at >= at).order_by(c.id))]

    def notice_sent(self, dedup_key: str) -> bool:
        """Whether a notice with this key was recorded as sent (an L1 step's effect)."""
        c = notices_t.c
        query = select(c.id).where(c.dedup_key == dedup_key, c.sent.is_(True)).limit(1)
        with self._tx("read notices") as conn:
            return conn.execute(query).first() is not None

    # -- audit log: append-only, there is no update or delete ----------------------------------
    def audit(self, event: str, at: datetime, workload_id: str | None = None, **payload: Any) -> None:
        with self._tx("append audit record") as conn:
            self._audit_in(conn, event, at, workload_id, payload)

    def _audit_in(
        self, conn: Connection, event: str, at: datetime, workload_id: str | None, payload: dict[str, Any]
    ) -> None:
        """Append one audit record inside the caller's transaction: every audit write goes here.
        Each record is hash-chained to the one before it (``store.audit_chain``)."""
        audit_chain.append(conn, at, event, workload_id, payload)

    def audit_log(self, limit: int = 100, workload_id: str | None = None) -> list[AuditRecord]:
        """The last ``limit`` audit records (of one workload), oldest first."""
        return [audit_of(r) for r in self._last(audit_t, limit, workload_id, "audit log")]

    def _last(self, table: Table, limit: int, workload_id: str | None, what: str) -> list[Row[Any]]:
        """The last ``limit`` rows of ``table`` (of one workload), oldest first."""
        query = select(table).order_by(table.c.id.desc()).limit(limit)
        if workload_id is not None:
            query = query.where(table.c.workload_id == workload_id)
        with self._tx(f"read {what}") as conn:
            rows = conn.execute(query).all()
        return list(reversed(rows))

    # -- workload snapshots -------------------------------------------------------------------
    def remember_workloads(self, workloads: Iterable[Workload], at: datetime) -> None:
        """Upsert each workload's snapshot; unchanged ones only get ``last_seen_at`` bumped, every
        ``SEEN_EVERY`` (``store/snapshots.py``)."""
        ws = list(workloads)
        if self._snapshots.steady(ws, at):
            return
        with self._tx("remember workloads") as conn:
            kept = self._snapshots.write(conn, ws, at)
        kept()

    def workload_info(self, workload_id: str) -> WorkloadRecord | None:
        with self._tx("read workload") as conn:
            row = conn.execute(select(workloads_t).where(workloads_t.c.id == workload_id)).first()
        return None if row is None else workload_of(row)

    def find_workloads(self, text: str, limit: int = 20) -> list[WorkloadRecord]:
        """Workloads whose id starts with ``text``, then those whose id or name contains it (any case)."""
        c = workloads_t.c
        needle = text.lower()
        prefix = func.lower(c.id).startswith(needle, autoescape=True)
        inside = or_(
            func.lower(c.id).contains(needle, autoescape=True),
            func.lower(c.name).contains(needle, autoescape=True),
        )
        order = (c.last_seen_at.desc(), c.id)
        with self._tx("find workloads") as conn:
            first = conn.execute(select(workloads_t).where(prefix).order_by(*order).limit(limit)).all()
            more = conn.execute(
                select(workloads_t).where(inside, ~prefix).order_by(*order).limit(limit)
            ).all()
        return [workload_of(r) for r in [*first, *more][:limit]]
