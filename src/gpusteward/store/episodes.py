"""Writing the finding episodes: one per (subject, rule) from the tick it is first seen until
its waste ends, refreshed with the latest finding.

A fleet with a thousand wasting workloads sees a thousand open episodes a tick. The leader keeps
them in memory (``OpenEpisodes``): which are open, their ids, their waste so far. Only the
leader writes episodes, so after the first read that memory is the table's open rows; it is read
again on demand (``forget``) when leadership changes hands or any of the store's transactions
fails (a waiting refresh is then dropped: the waste goes on from the last one written).

An episode opens and ends in the database at once. Its refresh (latest evidence, message, waste,
``last_seen_at``) is written when it is ``every`` old, as a workload's ``last_seen_at`` is, and
when it ends or the loop stops (``flush``); in between, the newest refresh waits in memory. The
waste adds up from memory tick by tick. After a crash it goes on from the last refresh written:
the time since is added to the stored waste, so the waste counted never goes down.

The refresh goes through ``Bulk`` (compiled once, plain tuples, the JSON written by the store's
own serializer) and writes only what a finding sees anew: an open episode's subject and rule are
its key and never change.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement

from gpusteward.domain import fastjson
from gpusteward.domain.models import Finding
from gpusteward.domain.records import FindingEpisode, episode_subject, episode_waste, jsonable
from gpusteward.store.bulk import Bulk, times
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

Key = tuple[str, str]  # (subject, rule)


def _refresh(dialect: Dialect) -> ClauseElement:
    return update(episodes_t).where(episodes_t.c.id == bindparam("episode_id"))


_REFRESH = Bulk(_refresh, _REFRESHED)


@dataclass(slots=True)
class _Open:
    """An open episode as the leader knows it."""

    id: int
    workload_id: str | None
    wasted_minutes: float  # up to ``last_seen_at``
    last_seen_at: datetime
    written_at: datetime  # the ``last_seen_at`` of the row in the database
    waiting: Finding | None = None  # the newest refresh not written yet (seen at ``last_seen_at``)


class OpenEpisodes:
    """The open episodes of the database, kept by the one replica that writes them."""

    def __init__(self, every: timedelta) -> None:
        self.every = every
        self._open: dict[Key, _Open] | None = None

    def forget(self) -> None:
        """Read the table again before the next write (another replica may have written)."""
        self._open = None

    def _read(self, conn: Connection) -> dict[Key, _Open]:
        if self._open is None:
            c = episodes_t.c
            query = select(c.id, c.subject, c.rule, c.workload_id, c.wasted_minutes, c.last_seen_at)
            self._open = {
                (r.subject, r.rule): _Open(
                    r.id, r.workload_id, r.wasted_minutes, r.last_seen_at, r.last_seen_at
                )
                for r in conn.execute(query.where(c.ended_at.is_(None)))
            }
        return self._open

    def keys(self, conn: Connection) -> set[tuple[str, str]]:
        """(workload id, rule) of every open episode of a workload."""
        return {
            (e.workload_id, rule) for (_, rule), e in self._read(conn).items() if e.workload_id is not None
        }

    def record(self, conn: Connection, findings: Sequence[Finding], at: datetime) -> None:
        """Open an episode per new (subject, rule); refresh the open one with the latest finding."""
        open_ = self._read(conn)
        latest = {(episode_subject(f), f.rule): f for f in findings}
        due: list[_Open] = []
        opened: list[dict[str, Any]] = []
        for key, f in sorted(latest.items(), key=lambda kv: kv[0]):
            e = open_.get(key)
            if e is None:
                opened.append({**finding_row(f, key[0], at), "first_seen_at": at})
                continue
            # A finding sees only its window; the episode keeps adding the time since.
            since = (at - e.last_seen_at).total_seconds() / 60
            e.wasted_minutes = max(f.wasted_minutes, e.wasted_minutes + since)
            e.last_seen_at, e.waiting = at, f
            if at - e.written_at >= self.every:
                due.append(e)
        self._write(conn, due)
        if opened:
            conn.execute(insert(episodes_t), opened)
            self._opened(conn, open_, opened, at)

    def _opened(
        self, conn: Connection, open_: dict[Key, _Open], rows: list[dict[str, Any]], at: datetime
    ) -> None:
        """Learn the ids of the episodes just opened at ``at``."""
        c = episodes_t.c
        query = select(c.id, c.subject, c.rule).where(c.ended_at.is_(None), c.first_seen_at == at)
        ids = {(r.subject, r.rule): r.id for r in conn.execute(query)}
        for row in rows:
            key = (row["subject"], row["rule"])
            if key not in ids:  # not found as written (a clock with odd precision): read all again
                self._open = None
                return
            open_[key] = _Open(ids[key], row["workload_id"], row["wasted_minutes"], at, at)

    def close(self, conn: Connection, keys: Iterable[tuple[str, str]], at: datetime) -> None:
        """End the open episodes of these (workload id, rule) pairs, their last refresh written."""
        ending = sorted(set(keys))
        if not ending:
            return
        open_ = self._read(conn)
        by_workload = {(e.workload_id, key[1]): key for key, e in open_.items() if e.workload_id is not None}
        self._write(conn, [open_[k] for k in (by_workload.get(pair) for pair in ending) if k is not None])
        c = episodes_t.c
        for wid, rule in ending:
            where = (c.ended_at.is_(None), c.workload_id == wid, c.rule == rule)
            conn.execute(update(episodes_t).where(*where).values(ended_at=at))
            key = by_workload.get((wid, rule))
            if key is not None:
                del open_[key]

    def newest(self, stored: list[FindingEpisode]) -> list[FindingEpisode]:
        """``stored`` (as read from the table), each open episode with the refresh waiting for it."""
        open_ = self._open
        if not open_:
            return stored
        # A copy first (one C call): the web reads on its own threads while the tick adds episodes.
        waiting = {e.id: e for e in list(open_.values()) if e.waiting is not None}
        return [self._fresher(ep, waiting.get(ep.id)) if ep.ended_at is None else ep for ep in stored]

    @staticmethod
    def _fresher(ep: FindingEpisode, e: _Open | None) -> FindingEpisode:
        f, seen, minutes = (None, None, 0.0) if e is None else (e.waiting, e.last_seen_at, e.wasted_minutes)
        if f is None or seen is None:
            return ep
        # As the table gives it back: JSON has no NaN or infinity, and a null reads NaN.
        evidence = {
            outer: {k: v if math.isfinite(v) else math.nan for k, v in values.items()}
            for outer, values in f.evidence.items()
        }
        waste = episode_waste(f, minutes)
        finding = replace(
            f,
            at=seen,
            evidence=evidence,
            wasted_minutes=waste["wasted_minutes"],
            wasted_gpu_hours=waste["wasted_gpu_hours"],
            wasted_cost=waste["wasted_cost"],
        )
        return replace(ep, finding=finding, last_seen_at=seen)

    def flush(self, conn: Connection) -> None:
        """Write every refresh still waiting (the loop stops)."""
        if self._open is not None:
            self._write(conn, list(self._open.values()))

    def _write(self, conn: Connection, episodes: Sequence[_Open]) -> None:
        at_of = times(conn.dialect, episodes_t.c.last_seen_at)
        rows: list[tuple[Any, ...]] = []
        for e in episodes:
            f = e.waiting
            if f is None:
                continue
            waste = episode_waste(f, e.wasted_minutes)
            rows.append(
                (
                    f.kind,
                    f.action.value,
                    fastjson.dumps_text(list(f.gpu_uuids)),
                    fastjson.dumps_text(jsonable(dict(f.evidence))),
                    f.message,
                    at_of(e.last_seen_at),
                    waste["wasted_minutes"],
                    waste["wasted_gpu_hours"],
                    waste["wasted_cost"],
                    e.id,
                )
            )
            e.written_at, e.waiting = e.last_seen_at, None
        _REFRESH.run(conn, rows)
