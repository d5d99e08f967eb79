"""Paged, filtered reads for the web admin: finding episodes, actions and the audit log.

Every filter runs in SQL, so a match older than any fixed window is still found. Pages are
keyset pages on the id, newest first: ``before`` is the last id the caller saw. Unlike
LIMIT/OFFSET, a page deep in a long history costs the same as the first, and rows appended
while someone pages (the audit log grows every tick) neither shift nor repeat entries. There is
no total count on purpose: counting every match of a free-text search is a full scan per page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import ColumnElement, Select, Table, Text, cast, false, func, or_, select

from gpusteward.domain import fastjson
from gpusteward.domain.models import Action, Level, Owner
from gpusteward.store.db import FindingEpisode, StateStore
from gpusteward.store.dbschema import (
    AuditRecord,
    action_of,
    actions_t,
    audit_t,
    episode_of,
    episodes_t,
    workloads_t,
)
from gpusteward.store.rows import owner_of

T = TypeVar("T")
#: Rows per query when a caller walks every match (exports).
CHUNK = 1000


@dataclass(frozen=True)
class Page(Generic[T]):
    rows: list[T]
    #: Pass as ``before`` to get the next (older) page; None on the last page.
    next_before: int | None


@dataclass(frozen=True)
class FindingFilter:
    """Exact matches on kind and on the owner's user and team (from the workload snapshot). A
    node matches an episode holding any of ``gpu_uuids`` or naming ``text`` in its message."""

    kind: str = ""
    owner: str = ""
    team: str = ""
    node_gpus: tuple[str, ...] = ()
    node: str = ""
    open_only: bool = True


def _page(store: StateStore, table: Table, where: Sequence[Any], before: int | None, limit: int) -> Page[Any]:
    query: Select[Any] = select(table).where(*where)
    if before is not None:
        query = query.where(table.c.id < before)
    query = query.order_by(table.c.id.desc()).limit(limit + 1)  # one more: is there a next page?
    with store.transaction(f"browse {table.name}") as conn:
        rows = conn.execute(query).all()
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(list(rows), rows[-1].id if more else None)


def _words(
    q: str, columns: Sequence[ColumnElement[Any]], extra: Callable[[str], Any] | None = None
) -> list[Any]:
    """Each word of ``q`` in some column, any case (the search box's meaning)."""
    out = []
    for word in q.lower().split():
        anywhere = [func.lower(c).contains(word, autoescape=True) for c in columns]
        if extra is not None:
            anywhere.append(extra(word))
        out.append(or_(*anywhere))
    return out


def _as_text(column: ColumnElement[Any]) -> ColumnElement[str]:
    # JSON columns hold the text the store wrote (fastjson.dumps_text) on SQLite and PostgreSQL alike.
    return cast(column, Text)


def actions_page(
    store: StateStore,
    *,
    q: str = "",
    status: str = "",
    level: str = "",
    workload_id: str = "",
    before: int | None = None,
    limit: int = 200,
) -> Page[Action]:
    """Actions, newest first. ``level`` is a label (``L2``); ``q`` searches the workload, step,
    rule, status, level, detail, GPUs and idempotency key."""
    c = actions_t.c
    where: list[Any] = []
    if status:
        where.append(c.status == status)
    if level:
        levels = [int(lv) for lv in Level if lv.label == level]
        where.append(c.level == levels[0] if levels else false())
    if workload_id:
        where.append(c.workload_id == workload_id)

    def by_level(word: str) -> Any:
        hits = [int(lv) for lv in Level if word in lv.label.lower()]
        return c.level.in_(hits) if hits else false()

    columns = [c.workload_id, c.step, c.rule, c.status, c.detail, c.idempotency_key, _as_text(c.gpu_uuids)]
    where += _words(q, columns, by_level)
    page = _page(store, actions_t, where, before, limit)
    return Page([action_of(r) for r in page.rows], page.next_before)


def audit_page(
    store: StateStore,
    *,
    q: str = "",
    event: str = "",
    workload_id: str = "",
    before: int | None = None,
    limit: int = 200,
) -> Page[AuditRecord]:
    """Audit records, newest first. ``event`` is a prefix (``approval.``, case as written); ``q``
    searches the event, the workload and the payload."""
    c = audit_t.c
    where: list[Any] = []
    if event:
        where.append(func.substr(c.event, 1, len(event)) == event)  # a prefix, no LIKE wildcards
    if workload_id:
        where.append(c.workload_id == workload_id)
    where += _words(q, [c.event, c.workload_id, _as_text(c.payload)])
    page = _page(store, audit_t, where, before, limit)
    rows = [AuditRecord(r.id, r.at, r.event, r.workload_id, dict(r.payload)) for r in page.rows]
    return Page(rows, page.next_before)


def _owner(field: str) -> ColumnElement[str]:
    value: ColumnElement[str] = workloads_t.c.owner[field].as_string()
    return value


def _finding_where(f: FindingFilter) -> list[Any]:
    c = episodes_t.c
    where: list[Any] = []
    if f.open_only:
        where.append(c.ended_at.is_(None))
    if f.kind:
        where.append(c.kind == f.kind)
    for field, value in (("user", f.owner), ("team", f.team)):
        if value:
            snapshot = select(workloads_t.c.id).where(_owner(field) == value)
            where.append(c.workload_id.in_(snapshot))
    if f.node:
        gpus = _as_text(c.gpu_uuids)
        held = [gpus.contains(fastjson.dumps_text(u), autoescape=True) for u in f.node_gpus]
        where.append(or_(*held, c.message.contains(f.node, autoescape=True)))
    return where


@dataclass(frozen=True, slots=True)
class Holder:
    """Who a finding's workload was, from its snapshot: what a list of findings shows of it."""

    name: str
    owner: Owner


def findings_page(
    store: StateStore, f: FindingFilter, *, before: int | None = None, limit: int = 500
) -> Page[tuple[FindingEpisode, Holder | None]]:
    """Finding episodes, newest first, each with its workload's holder (None without a snapshot)."""
    page = _page(store, episodes_t, _finding_where(f), before, limit)
    episodes = [episode_of(r) for r in page.rows]
    wids = sorted({e.finding.workload_id for e in episodes if e.finding.workload_id})
    w = workloads_t.c
    # Three columns, not the snapshots: their labels and annotations were a third of a page's reading.
    with store.transaction("browse workloads") as conn:
        found = conn.execute(select(w.id, w.name, w.owner).where(w.id.in_(wids))).all() if wids else []
    holders = {r.id: Holder(r.name, owner_of(r.owner) or Owner("")) for r in found}
    rows = [(e, holders.get(e.finding.workload_id or "")) for e in episodes]
    return Page(rows, page.next_before)


@dataclass(frozen=True)
class FindingFacets:
    kinds: list[str]
    owners: list[str]
    teams: list[str]
    #: Every distinct set of GPUs the episodes held (the web maps them to nodes).
    gpu_uuids: list[str]


def finding_facets(store: StateStore, *, open_only: bool) -> FindingFacets:
    """The values the findings filters can take, over all (or all open) episodes."""
    c = episodes_t.c
    scope = [c.ended_at.is_(None)] if open_only else []
    held = select(c.workload_id).where(*scope, c.workload_id.is_not(None))
    owned = workloads_t.c.id.in_(held)
    # Two queries, not one per facet: each pair is distinct in SQL, the columns split here.
    with store.transaction("browse finding facets") as conn:
        held_by = conn.execute(select(c.kind, _as_text(c.gpu_uuids)).where(*scope).distinct()).all()
        owners = conn.execute(select(_owner("user"), _owner("team")).where(owned).distinct()).all()
    uuids = {str(u) for _, text in held_by for u in fastjson.loads(text)}
    return FindingFacets(
        kinds=sorted({k for k, _ in held_by if k}),
        owners=sorted({u for u, _ in owners if u}),
        teams=sorted({t for _, t in owners if t}),
        gpu_uuids=sorted(uuids),
    )


def action_times(store: StateStore, start: datetime, end: datetime) -> list[tuple[datetime, Level, str]]:
    """(created at, level, status) of every action created in [start, end), dry runs included:
    three columns, not the actions (the overview's last day at 10,000 GPUs holds some 10,000)."""
    a = actions_t.c
    query = select(a.created_at, a.level, a.status).where(a.created_at >= start, a.created_at < end)
    with store.transaction("browse action times") as conn:
        rows = conn.execute(query).all()
    return [(r.created_at, Level(r.level), str(r.status)) for r in rows]


def every(
    fetch: Callable[[int | None, int], Page[T]], *, start: int | None = None, chunk: int = CHUNK
) -> Iterator[T]:
    """Every match of a paged query (older than ``start``), newest first, with one chunk of
    ``chunk`` rows in memory at a time. ``fetch(before, limit)`` reads one page."""
    before = start
    while True:
        page = fetch(before, chunk)
        yield from page.rows
        if page.next_before is None:
            return
        before = page.next_before
