"""The showback tables (``ledger_showback``, ``ledger_closed_months``) in the state store's
database, used inside the ledger's transactions (``store.ledger.LedgerStore``).

Amounts are added, never overwritten. Adding reads the closed months in the same transaction
and moves a closed month's amounts to the day they arrive, so a close and a flush that race
still leave the closed month as it was closed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import Connection

from gpusteward.domain.records import (
    SHOWBACK_AMOUNTS,
    ShowbackAmounts,
    ShowbackKey,
    ShowbackRow,
    check_closable,
    day_key,
    move_late,
)
from gpusteward.store.dbschema import ledger_closed_months_t, ledger_showback_t

_KEY_COLUMNS = ("day", "team", "user_name", "gpu_model", "rate", "currency")


def _key(r: object) -> ShowbackKey:
    return ShowbackKey(*(getattr(r, n) for n in _KEY_COLUMNS))


def closed_months(conn: Connection) -> dict[str, datetime]:
    c = ledger_closed_months_t.c
    return {r.month: r.closed_at for r in conn.execute(select(c.month, c.closed_at))}


def add(conn: Connection, showback: Mapping[ShowbackKey, ShowbackAmounts], late_day: str | None) -> None:
    if not showback:
        return
    moved = move_late(showback, closed_months(conn), late_day)
    c = ledger_showback_t.c
    query = select(c.id, *(c[n] for n in _KEY_COLUMNS)).where(c.day.in_(sorted({k.day for k in moved})))
    ids = {_key(r): r.id for r in conn.execute(query)}
    ups, new = [], []
    for k, a in sorted(moved.items()):
        values = {n: getattr(a, n) for n in SHOWBACK_AMOUNTS}
        if k in ids:
            ups.append({"rid": ids[k], **{f"d_{n}": v for n, v in values.items()}})
        else:
            keys = dict(
                zip(_KEY_COLUMNS, (k.day, k.team, k.user, k.gpu_model, k.rate, k.currency), strict=True)
            )
            new.append({**keys, **values})
    if ups:
        stmt = update(ledger_showback_t).where(c.id == bindparam("rid"))
        conn.execute(stmt.values({n: c[n] + bindparam(f"d_{n}") for n in SHOWBACK_AMOUNTS}), ups)
    if new:
        conn.execute(insert(ledger_showback_t), new)


def rows(conn: Connection, start: date, end: date, team: str | None) -> list[ShowbackRow]:
    c = ledger_showback_t.c
    query = select(ledger_showback_t).where(c.day >= day_key(start), c.day < day_key(end))
    if team is not None:
        query = query.where(c.team == team)
    found = conn.execute(query.order_by(*(c[n] for n in _KEY_COLUMNS))).all()
    return [
        ShowbackRow(_key(r), ShowbackAmounts(**{n: getattr(r, n) for n in SHOWBACK_AMOUNTS})) for r in found
    ]


def close(conn: Connection, month: str, at: datetime) -> bool:
    check_closable(month, at)
    c = ledger_closed_months_t.c
    if conn.execute(select(c.month).where(c.month == month)).first() is not None:
        return False
    conn.execute(insert(ledger_closed_months_t).values(month=month, closed_at=at))
    return True
