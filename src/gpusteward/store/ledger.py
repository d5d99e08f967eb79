"""The waste and savings ledger: money and GPU-hours per day, owner, team and kind of waste,
GPU use per workload per day, and the marks that keep counting exact across restarts.

It shares the state store's database and transactions (tables in ``dbschema``). Amounts are
added, never overwritten: ``add`` increments the rows of a day in one transaction, so the loop
can flush as often as it likes. Days are UTC dates written ``YYYY-MM-DD``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import date, datetime
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement

from gpusteward.domain import fastjson
from gpusteward.domain.models import ActionStatus, Level
from gpusteward.domain.records import (
    DailyAmounts,
    DailyKey,
    Mark,
    ShowbackAmounts,
    ShowbackKey,
    ShowbackRow,
    UsageAmounts,
    UsageKey,
    day_key,
    jsonable,
)
from gpusteward.domain.usage_rows import UsageRows, usage_row
from gpusteward.store import showback as showback_sql
from gpusteward.store.bulk import Bulk, times
from gpusteward.store.dbschema import (
    actions_t,
    ledger_daily_t,
    ledger_marks_t,
    ledger_usage_t,
    workloads_t,
)
from gpusteward.store.rows import chunks
from gpusteward.store.sql_parts import SqlParts

# The amounts and marks are declared in domain.records (the ledger port uses them); kept
# importable from here for the readers of the ledger.
__all__ = [
    "DailyAmounts",
    "DailyKey",
    "DailyRow",
    "LedgerStore",
    "Mark",
    "StopRow",
    "UsageAmounts",
    "UsageKey",
    "UsageRow",
    "day_key",
]


_AMOUNTS = tuple(f.name for f in fields(DailyAmounts))


@dataclass(frozen=True, slots=True)
class DailyRow:
    key: DailyKey
    amounts: DailyAmounts


@dataclass(frozen=True, slots=True)
class UsageRow:
    key: UsageKey
    amounts: UsageAmounts


@dataclass(frozen=True, slots=True)
class StopRow:
    """A succeeded stop (L2 and above) with its workload's owner."""

    at: datetime
    workload_id: str
    level: Level
    rule: str
    gpus: int
    user: str
    team: str


#: The upsert's parameters, in this order (``UsageAmounts``' fields, the owner's renamed).
_USAGE_COLUMNS = (
    "day",
    "workload_id",
    "user_name",
    "team",
    "gpus_requested",
    "gpus_held",
    "held_gpu_hours",
    "busy_gpu_hours",
    "advise_idle_gpus",
)


def _usage_upsert(dialect: Dialect) -> ClauseElement:
    """One row per workload and day: hours add up, the GPU counts keep their largest, the owner
    is the newest (no read of the stored rows first)."""
    pg = dialect.name == "postgresql"
    stmt = (postgresql if pg else sqlite).insert(ledger_usage_t)
    c, ex = ledger_usage_t.c, stmt.excluded
    larger = func.greatest if pg else func.max  # SQLite's two-argument max() is scalar
    sets: dict[str, Any] = {"user_name": ex.user_name, "team": ex.team}
    sets.update({n: larger(c[n], ex[n]) for n in ("gpus_requested", "gpus_held", "advise_idle_gpus")})
    sets.update({n: c[n] + ex[n] for n in ("held_gpu_hours", "busy_gpu_hours")})
    upsert: ClauseElement = stmt.on_conflict_do_update(index_elements=["day", "workload_id"], set_=sets)
    return upsert


#: Every workload a tick (25,000 at 100,000 GPUs). Its columns are text and numbers: SQLAlchemy's
#: per-row parameter processing, 3/5 of the upsert's time, had nothing to convert.
_USAGE_UPSERT = Bulk(_usage_upsert, _USAGE_COLUMNS)


def _marks_upsert(dialect: Dialect) -> ClauseElement:
    stmt = (postgresql if dialect.name == "postgresql" else sqlite).insert(ledger_marks_t)
    sets = {"until": stmt.excluded.until, "data": stmt.excluded.data}
    upsert: ClauseElement = stmt.on_conflict_do_update(index_elements=["key"], set_=sets)
    return upsert


#: A mark per GPU counted as waste, saved each tick it is (a thousand at 1,000 wasting GPUs).
_MARKS_UPSERT = Bulk(_marks_upsert, ("key", "until", "data"))


class LedgerStore:
    """The ledger tables of a ``StateStore``'s database (its schema creates them)."""

    def __init__(self, state: SqlParts) -> None:
        self.state = state

    # -- writing ------------------------------------------------------------------------------
    def add(
        self,
        daily: Mapping[DailyKey, DailyAmounts],
        usage: Mapping[UsageKey, UsageAmounts],
        marks: Iterable[Mark] = (),
        drop_marks: Iterable[str] = (),
        *,
        showback: Mapping[ShowbackKey, ShowbackAmounts] | None = None,
        late_day: str | None = None,
    ) -> None:
        """Add amounts to their rows (creating them) and save or drop marks, in one transaction.
        Showback amounts of a closed month go to ``late_day`` instead."""
        saved, dropped = list(marks), sorted(set(drop_marks))
        if not (daily or usage or saved or dropped or showback):
            return
        with self.state._tx("add to the ledger") as conn:
            self._add_daily(conn, daily)
            self._add_usage(conn, usage)
            showback_sql.add(conn, showback or {}, late_day)
            for chunk in chunks(sorted(set(dropped) - {m.key for m in saved})):
                conn.execute(delete(ledger_marks_t).where(ledger_marks_t.c.key.in_(chunk)))
            at = times(conn.dialect, ledger_marks_t.c.until)
            kept = [(m.key, at(m.until), fastjson.dumps_text(jsonable(dict(m.data)))) for m in saved]
            _MARKS_UPSERT.run(conn, sorted(kept, key=lambda r: r[0]))

    def _add_daily(self, conn: Connection, daily: Mapping[DailyKey, DailyAmounts]) -> None:
        if not daily:
            return
        c = ledger_daily_t.c
        query = select(c.id, c.day, c.currency, c.user_name, c.team, c.kind).where(
            c.day.in_(sorted({k.day for k in daily}))
        )
        ids = {DailyKey(r.day, r.currency, r.user_name, r.team, r.kind): r.id for r in conn.execute(query)}
        ups = [{"rid": ids[k], **_plus(a)} for k, a in sorted(daily.items()) if k in ids]
        new = [_daily_row(k, a) for k, a in sorted(daily.items()) if k not in ids]
        if ups:
            stmt = update(ledger_daily_t).where(c.id == bindparam("rid"))
            conn.execute(stmt.values({n: c[n] + bindparam(f"d_{n}") for n in _AMOUNTS}), ups)
        if new:
            conn.execute(insert(ledger_daily_t), new)

    def _add_usage(self, conn: Connection, usage: Mapping[UsageKey, UsageAmounts]) -> None:
        """One upsert per workload and day, in one statement: hours add up, the GPU counts keep
        their largest, the owner is the newest (no read of the stored rows first)."""
        if not usage:
            return
        # The recorder's are the upsert's rows already.
        rows = usage.rows if isinstance(usage, UsageRows) else [usage_row(k, a) for k, a in usage.items()]
        _USAGE_UPSERT.run(conn, sorted(rows))

    # -- reading ------------------------------------------------------------------------------
    def marks(self) -> dict[str, Mark]:
        with self.state._tx("read ledger marks") as conn:
            rows = conn.execute(select(ledger_marks_t)).all()
        return {r.key: Mark(r.key, r.until, dict(r.data or {})) for r in rows}

    def showback(self, start: date, end: date, *, team: str | None = None) -> list[ShowbackRow]:
        """Showback rows of the days ``start`` <= day < ``end`` (of one team), in key order."""
        with self.state._tx("read showback") as conn:
            return showback_sql.rows(conn, start, end, team)

    def close_month(self, month: str, at: datetime) -> bool:
        """Freeze the showback rows of ``month`` (YYYY-MM); False when it was closed already."""
        with self.state._tx(f"close {month}") as conn:
            return showback_sql.close(conn, month, at)

    def closed_months(self) -> dict[str, datetime]:
        with self.state._tx("read closed months") as conn:
            return showback_sql.closed_months(conn)

    def daily(self, start: date, end: date, *, team: str | None = None) -> list[DailyRow]:
        """Rows of the days ``start`` <= day < ``end`` (of one team), by day, owner, kind."""
        c = ledger_daily_t.c
        query = select(ledger_daily_t).where(c.day >= day_key(start), c.day < day_key(end))
        if team is not None:
            query = query.where(c.team == team)
        with self.state._tx("read the ledger") as conn:
            rows = conn.execute(query.order_by(c.day, c.user_name, c.team, c.kind, c.currency)).all()
        return [
            DailyRow(
                DailyKey(r.day, r.currency, r.user_name, r.team, r.kind),
                DailyAmounts(**{n: getattr(r, n) for n in _AMOUNTS}),
            )
            for r in rows
        ]

    def usage(self, start: date, end: date, *, team: str | None = None) -> list[UsageRow]:
        c = ledger_usage_t.c
        query = select(ledger_usage_t).where(c.day >= day_key(start), c.day < day_key(end))
        if team is not None:
            query = query.where(c.team == team)
        with self.state._tx("read ledger usage") as conn:
            rows = conn.execute(query.order_by(c.day, c.workload_id)).all()
        return [
            UsageRow(
                UsageKey(r.day, r.workload_id),
                UsageAmounts(
                    r.user_name,
                    r.team,
                    r.gpus_requested,
                    r.gpus_held,
                    r.held_gpu_hours,
                    r.busy_gpu_hours,
                    r.advise_idle_gpus,
                ),
            )
            for r in rows
        ]

    def totals(self, currency: str) -> tuple[float, float]:
        """(waste cost, saved cost) of every day the ledger holds, in ``currency``."""
        by_day = self.money_by_day(None, None, currency)
        return sum(w for w, _ in by_day.values()), sum(s for _, s in by_day.values())

    def money_by_day(
        self, start: date | None, end: date | None, currency: str
    ) -> dict[str, tuple[float, float]]:
        """(waste cost, saved cost) per day ``start`` <= day < ``end`` (None: unbounded) in
        ``currency``, summed in SQL rather than by reading each row: a month at 10,000 GPUs is
        some 100,000 rows, and the overview asks on every request."""
        c = ledger_daily_t.c
        query = select(c.day, func.sum(c.waste_cost), func.sum(c.saved_cost)).where(c.currency == currency)
        if start is not None:
            query = query.where(c.day >= day_key(start))
        if end is not None:
            query = query.where(c.day < day_key(end))
        with self.state._tx("read ledger money per day") as conn:
            rows = conn.execute(query.group_by(c.day)).all()
        return {day: (float(waste or 0.0), float(saved or 0.0)) for day, waste, saved in rows}

    def use_by_day(self, start: date, end: date) -> dict[str, tuple[float, float]]:
        """(held GPU-hours, busy GPU-hours) per day ``start`` <= day < ``end``, summed in SQL."""
        c = ledger_usage_t.c
        query = select(c.day, func.sum(c.held_gpu_hours), func.sum(c.busy_gpu_hours)).where(
            c.day >= day_key(start), c.day < day_key(end)
        )
        with self.state._tx("read ledger use per day") as conn:
            rows = conn.execute(query.group_by(c.day)).all()
        return {day: (float(held or 0.0), float(busy or 0.0)) for day, held, busy in rows}

    def day_range(self) -> tuple[date, date] | None:
        """The first and last day with ledger rows, or None for an empty ledger."""
        c = ledger_daily_t.c
        u = ledger_usage_t.c
        with self.state._tx("read ledger days") as conn:
            lo1, hi1 = conn.execute(select(func.min(c.day), func.max(c.day))).one()
            lo2, hi2 = conn.execute(select(func.min(u.day), func.max(u.day))).one()
        days = [d for d in (lo1, hi1, lo2, hi2) if d]
        if not days:
            return None
        return date.fromisoformat(min(days)), date.fromisoformat(max(days))

    def stops(self, start: datetime, end: datetime, *, team: str | None = None) -> list[StopRow]:
        """Succeeded, real (not dry-run) actions at L2 and above created in [start, end)."""
        a, w = actions_t.c, workloads_t.c
        query = (
            select(a.created_at, a.workload_id, a.level, a.rule, a.gpu_count, w.owner)
            .select_from(actions_t.outerjoin(workloads_t, w.id == a.workload_id))
            .where(
                a.created_at >= start,
                a.created_at < end,
                a.level >= int(Level.GRACEFUL_STOP),
                a.dry_run.is_(False),
                a.status == ActionStatus.SUCCEEDED.value,
            )
            .order_by(a.created_at, a.id)
        )
        with self.state._tx("read stops") as conn:
            rows = conn.execute(query).all()
        out = []
        for r in rows:
            owner = r.owner or {}
            row = StopRow(
                r.created_at,
                r.workload_id,
                Level(r.level),
                r.rule,
                r.gpu_count,
                str(owner.get("user", "")),
                str(owner.get("team", "")),
            )
            if team is None or row.team == team:
                out.append(row)
        return out

    def actions_by_level(self, start: datetime, end: datetime, *, team: str | None = None) -> dict[str, int]:
        """Real (not dry-run) actions per level created in [start, end), skipped ones excluded."""
        a, w = actions_t.c, workloads_t.c
        query = (
            select(a.level, w.owner)
            .select_from(actions_t.outerjoin(workloads_t, w.id == a.workload_id))
            .where(
                a.created_at >= start,
                a.created_at < end,
                a.dry_run.is_(False),
                a.status != ActionStatus.SKIPPED.value,
            )
        )
        counts = {lv.label: 0 for lv in Level if lv is not Level.NONE}
        with self.state._tx("count actions") as conn:
            for level, owner in conn.execute(query):
                if team is None or (owner or {}).get("team", "") == team:
                    counts[Level(level).label] += 1
        return counts


def _plus(a: DailyAmounts) -> dict[str, Any]:
    return {f"d_{n}": getattr(a, n) for n in _AMOUNTS}


def _daily_row(k: DailyKey, a: DailyAmounts) -> dict[str, Any]:
    return {
        "day": k.day,
        "currency": k.currency,
        "user_name": k.user,
        "team": k.team,
        "kind": k.kind,
        **{n: getattr(a, n) for n in _AMOUNTS},
    }
