"""Writing the finding episodes: one per (subject, rule) from the tick it is first seen until
its waste ends, refreshed every tick with the latest finding.

A fleet with a thousand wasting workloads refreshes a thousand open episodes a tick; that
refresh goes through ``Bulk`` (compiled once, plain tuples, the JSON written by the store's own
serializer) and writes only what a finding sees anew: an open episode's subject and rule are its
key and never change.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement

from gpusteward.domain import fastjson
from gpusteward.domain.models import Finding
from gpusteward.domain.records import episode_subject, episode_waste, jsonable
from gpusteward.store.bulk import Bulk, bound
from gpusteward.store.dbschema import episodes_t
from gpusteward.store.rows import finding_row

#: What a refresh writes, in the order of each row's values; the episode's id last.
_REFRESHED = (
    "kind",
    "action",
    "gpu_uuids",
    "evidence",
    "message",
    "last_seen_at",
    "wasted_minutes",
    "wasted_gpu_hours",
    "wasted_cost",
    "episode_id",
)


def _refresh(dialect: Dialect) -> ClauseElement:
    return update(episodes_t).where(episodes_t.c.id == bindparam("episode_id"))


_REFRESH = Bulk(_refresh, _REFRESHED)


def record(conn: Connection, findings: Sequence[Finding], at: datetime) -> None:
    """Open an episode per new (subject, rule); refresh the open one with the latest finding."""
    latest = {(episode_subject(f), f.rule): f for f in findings}
    c = episodes_t.c
    query = select(c.id, c.subject, c.rule, c.wasted_minutes, c.last_seen_at).where(c.ended_at.is_(None))
    open_ = {(r.subject, r.rule): r for r in conn.execute(query)}
    seen_at = bound(conn.dialect, c.last_seen_at, at)
    refreshed: list[tuple[Any, ...]] = []
    opened: list[dict[str, Any]] = []
    for key, f in sorted(latest.items(), key=lambda kv: kv[0]):
        prev = open_.get(key)
        if prev is None:
            opened.append({**finding_row(f, key[0], at), "first_seen_at": at})
            continue
        # A finding sees only its window; the episode keeps adding the time since.
        since = (at - prev.last_seen_at).total_seconds() / 60
        waste = episode_waste(f, max(f.wasted_minutes, prev.wasted_minutes + since))
        refreshed.append(
            (
                f.kind,
                f.action.value,
                fastjson.dumps_text(list(f.gpu_uuids)),
                fastjson.dumps_text(jsonable(dict(f.evidence))),
                f.message,
                seen_at,
                waste["wasted_minutes"],
                waste["wasted_gpu_hours"],
                waste["wasted_cost"],
                prev.id,
            )
        )
    _REFRESH.run(conn, refreshed)
    if opened:
        conn.execute(insert(episodes_t), opened)
