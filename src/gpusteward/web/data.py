"""The listings as plain data (findings, a workload, actions, audit, approvals) and the export
formats: the JSON API returns the rows as they are, the pages render them. Each listing takes
its query from ``web.filters``, the one parser the API and the pages share.

The overview's figures are in ``overview_data``, the rules' in ``rule_data``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from enum import Enum
from typing import Any

from fastapi.responses import Response

from gpusteward.domain import fastjson
from gpusteward.domain.models import Gpu
from gpusteward.domain.records import NotPlain, json_walk
from gpusteward.store import browse
from gpusteward.store.controls import ApprovalRecord
from gpusteward.store.db import FindingEpisode, StateStore, WorkloadRecord
from gpusteward.web.filters import ActionQuery, ApprovalQuery, AuditQuery, FindingQuery
from gpusteward.web.read_cache import DIRECT, Reads


def iso(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).isoformat()


def plain(value: Any) -> Any:
    """JSON-ready: datetimes as ISO 8601, NaN as null, enums by value."""
    try:  # the same answer without the JSON text in between (a findings page is 500 rows)
        return json_walk(value, _leaf)
    except NotPlain:
        return json.loads(json.dumps(value, default=_default), parse_constant=lambda _: None)


def json_bytes(value: Any) -> bytes:
    """The JSON text of ``plain(value)``, written without building ``plain``'s copy first."""
    fast = fastjson.dumps(value, _default)
    if fast is not None:
        return fast
    return json.dumps(plain(value), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def json_response(value: Any, status: int = 200) -> Response:
    """``value`` as an ``application/json`` answer, through ``json_bytes`` (the API's and the hub's)."""
    return Response(json_bytes(value), status_code=status, media_type="application/json")


def _leaf(v: Any) -> Any:
    if isinstance(v, datetime | date):
        return _default(v)
    raise NotPlain


def _default(v: Any) -> Any:
    if isinstance(v, datetime):
        return iso(v)
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, Enum):  # by value, as records' to_dict writes them (and orjson does)
        return v.value
    return str(v)


def to_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, header: bool = True) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    if header:
        w.writerow(columns)
    for r in rows:
        w.writerow(["" if r.get(c) is None else _cell(r.get(c)) for c in columns])
    return buf.getvalue()


def _cell(v: Any) -> str:
    if isinstance(v, datetime):
        return iso(v) or ""
    if isinstance(v, list | tuple):
        return ";".join(str(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(plain(v), sort_keys=True)
    return str(v)


def gpu_name(gpus: Mapping[str, Gpu], uuid: str) -> str:
    g = gpus.get(uuid)
    return g.display if g else uuid


# -- findings ------------------------------------------------------------------------------------
def finding_row(
    e: FindingEpisode, w: browse.Holder | WorkloadRecord | None, gpus: Mapping[str, Gpu]
) -> dict[str, Any]:
    return _with_names(_stored_row(e, w), gpus)


def _stored_row(e: FindingEpisode, w: browse.Holder | WorkloadRecord | None) -> dict[str, Any]:
    """A finding's row as far as the store answers it (the read cache keeps these)."""
    row = e.to_dict()
    row["user"] = w.owner.user if w else ""
    row["team"] = w.owner.team if w else ""
    row["workload_name"] = w.name if w else ""
    return row


def _with_names(stored: dict[str, Any], gpus: Mapping[str, Gpu]) -> dict[str, Any]:
    """A copy of a stored row with its GPUs' names and nodes from the live inventory."""
    uuids = stored["gpu_uuids"]
    return {
        **stored,
        "gpus": [gpu_name(gpus, u) for u in uuids],
        "nodes": sorted({gpus[u].node for u in uuids if u in gpus}),
        "open": stored["ended_at"] is None,
    }


@dataclass(frozen=True)
class Listing:
    """One page of a list, newest first; ``next_before`` is the ``before`` of the next page."""

    rows: list[dict[str, Any]]
    next_before: int | None


def findings(
    store: StateStore, gpus: Mapping[str, Gpu], query: FindingQuery, reads: Reads = DIRECT
) -> Listing:
    """Finding episodes, newest first, filtered in the store (every filter is an exact match but
    ``node``: the GPUs the live inventory places on it, or its name in the finding's message)."""
    node = query.node
    on_node = tuple(sorted(u for u, g in gpus.items() if g.node == node)) if node else ()
    flt = browse.FindingFilter(
        kind=query.kind, owner=query.owner, team=query.team, node=node, node_gpus=on_node,
        open_only=query.status != "all",
    )  # fmt: skip

    def read() -> Listing:
        page = browse.findings_page(store, flt, before=query.before, limit=query.limit)
        return Listing([_stored_row(e, w) for e, w in page.rows], page.next_before)

    stored = reads.get(("findings", flt, query.before, query.limit), read)
    return Listing([_with_names(r, gpus) for r in stored.rows], stored.next_before)


def facets(
    store: StateStore, gpus: Mapping[str, Gpu], *, status: str = "open", reads: Reads = DIRECT
) -> dict[str, list[str]]:
    """The values each findings filter can take, over every (open) episode."""
    open_only = status != "all"
    f = reads.get(("facets", open_only), lambda: browse.finding_facets(store, open_only=open_only))
    return {
        "kind": f.kinds,
        "owner": f.owners,
        "team": f.teams,
        "node": sorted({gpus[u].node for u in f.gpu_uuids if u in gpus}),
    }


# -- workload ------------------------------------------------------------------------------------
def workload(store: StateStore, wid: str, gpus: Mapping[str, Gpu]) -> dict[str, Any] | None:
    info = store.workload_info(wid)
    episodes = store.findings_for(wid)
    if info is None and not episodes:
        return None
    now_snooze = [s.to_dict() for s in store.snoozes(wid)]
    return {
        "workload": info.to_dict() if info else {"id": wid},
        "findings": [finding_row(e, info, gpus) for e in reversed(episodes)],
        "decisions": [
            {
                "at": d.at,
                "level": d.level.label,
                "step": d.step,
                "hold": d.hold.value,
                "rule": d.rule,
                "reason": d.reason,
            }
            for d in reversed(store.decisions_for(wid))
        ],
        "actions": [action_row(a) for a in reversed(store.actions(limit=200, workload_id=wid))],
        "notices": [n.to_dict() for n in reversed(store.notices(wid))],
        "approvals": [a.to_dict() for a in store.approvals(limit=500) if a.workload_id == wid],
        "snoozes": now_snooze,
        "audit": [audit_row(r) for r in reversed(store.audit_log(limit=200, workload_id=wid))],
    }


# -- actions and audit ---------------------------------------------------------------------------
ACTION_COLUMNS = ("id", "created_at", "updated_at", "workload_id", "level", "step", "rule", "status",
                  "dry_run", "attempts", "gpu_uuids", "detail", "idempotency_key")  # fmt: skip
AUDIT_COLUMNS = ("id", "at", "event", "workload_id", "payload")


def action_row(a: Any) -> dict[str, Any]:
    return {
        "id": a.id,
        "created_at": a.created_at,
        "updated_at": a.updated_at,
        "workload_id": a.workload_id,
        "level": a.level.label,
        "step": a.step,
        "rule": a.rule,
        "status": a.status.value,
        "dry_run": a.dry_run,
        "attempts": a.attempts,
        "gpu_uuids": list(a.gpu_uuids),
        "detail": a.detail,
        "idempotency_key": a.idempotency_key,
    }


def audit_row(r: Any) -> dict[str, Any]:
    return {"id": r.id, "at": r.at, "event": r.event, "workload_id": r.workload_id, "payload": r.payload}


def _action_filters(query: ActionQuery) -> dict[str, Any]:
    return {"q": query.q, "status": query.status, "level": query.level, "workload_id": query.workload}


def _audit_filters(query: AuditQuery) -> dict[str, Any]:
    return {"q": query.q, "event": query.event, "workload_id": query.workload}


def actions(store: StateStore, query: ActionQuery, reads: Reads = DIRECT) -> Listing:
    """One page of actions, newest first; ``q`` matches every word (any case) in some searched
    column."""
    filters = _action_filters(query)

    def read() -> Listing:
        page = browse.actions_page(store, before=query.before, limit=query.page_size, **filters)
        return Listing([action_row(a) for a in page.rows], page.next_before)

    return reads.get(("actions", query.before, query.page_size, *sorted(filters.items())), read)


def audit(store: StateStore, query: AuditQuery, reads: Reads = DIRECT) -> Listing:
    """One page of the audit log, newest first; ``event`` is a prefix."""
    filters = _audit_filters(query)

    def read() -> Listing:
        page = browse.audit_page(store, before=query.before, limit=query.page_size, **filters)
        return Listing([audit_row(r) for r in page.rows], page.next_before)

    return reads.get(("audit", query.before, query.page_size, *sorted(filters.items())), read)


def every_action(store: StateStore, query: ActionQuery) -> Iterator[dict[str, Any]]:
    """Every matching action older than ``before``, newest first, read in chunks (exports)."""
    filters = _action_filters(query)
    pages = browse.every(
        lambda b, n: browse.actions_page(store, before=b, limit=n, **filters), start=query.before
    )
    return (action_row(a) for a in pages)


def every_audit(store: StateStore, query: AuditQuery) -> Iterator[dict[str, Any]]:
    """Every matching audit record older than ``before``, newest first, read in chunks (exports)."""
    filters = _audit_filters(query)
    pages = browse.every(
        lambda b, n: browse.audit_page(store, before=b, limit=n, **filters), start=query.before
    )
    return (audit_row(r) for r in pages)


def approvals(store: StateStore, query: ApprovalQuery) -> list[ApprovalRecord]:
    """Approval requests, newest first (of one status, or all)."""
    return list(reversed(store.approvals(query.status, limit=query.limit)))


def csv_lines(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> Iterator[str]:
    """CSV text, the header first, a chunk of lines at a time (exports stream)."""
    yield to_csv([], columns)
    batch: list[Mapping[str, Any]] = []
    for r in rows:
        batch.append(r)
        if len(batch) >= browse.CHUNK:
            yield to_csv(batch, columns, header=False)
            batch = []
    if batch:
        yield to_csv(batch, columns, header=False)


def json_lines(rows: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """A JSON array, one element at a time (exports stream)."""
    yield "["
    for i, r in enumerate(rows):
        yield ("," if i else "") + json.dumps(plain(dict(r)))
    yield "]"
