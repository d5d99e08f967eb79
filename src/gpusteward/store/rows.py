"""Rows ↔ records for the SQL store, derived from the records' fields.

Columns are named after the fields of the record they hold, so one converter per field type
(enums, tuples, owners, JSON mappings) maps every table; only records that nest another
(an episode's finding, a notice record's notice) or pick a subset of columns say more.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from enum import Enum, IntEnum
from typing import Any, TypeVar, Union, cast, get_args, get_origin, get_type_hints

from sqlalchemy.engine import Row

from gpusteward.domain.models import Action, Decision, Finding, LadderState, Notice, Owner, Workload
from gpusteward.domain.records import (
    AS_IS,
    ApprovalRecord,
    AuditRecord,
    FindingEpisode,
    NoticeRecord,
    SnoozeRecord,
    WorkloadRecord,
    field_names,
    jsonable,
)

T = TypeVar("T")
_CHUNK = 500  # keeps IN lists well under every backend's bound-parameter limit


def chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]


def owner_json(owner: Owner | None) -> dict[str, Any] | None:
    return None if owner is None else {"user": owner.user, "team": owner.team, "contact": owner.contact}


def owner_of(value: Mapping[str, Any] | None) -> Owner | None:
    return None if value is None else Owner(value["user"], value.get("team", ""), value.get("contact"))


# -- reading: one converter per field, from its type ---------------------------------------------
def _converter(hint: Any) -> Callable[[Any], Any] | None:
    """How a column value becomes the field's value (None: as it is)."""
    args = get_args(hint)
    if get_origin(hint) in (Union, types.UnionType) and type(None) in args:
        inner_hint = next(a for a in args if a is not type(None))
        if inner_hint is Owner:
            return owner_of
        inner = _converter(inner_hint)
        return None if inner is None else (lambda v: None if v is None else inner(v))
    if hint is Owner:
        return lambda v: owner_of(v) or Owner("")
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint
    origin = get_origin(hint)
    if origin is tuple:
        return tuple
    if origin in (dict, Mapping):
        return dict
    return None


_Converters = tuple[tuple[str, Callable[[Any], Any] | None], ...]
_CONVERTERS: dict[type[Any], _Converters] = {}


def record_of(cls: type[T], values: Mapping[Any, Any], **given: Any) -> T:
    """A ``cls`` from the columns named after its fields (``given`` fields taken as they are)."""
    converters = _CONVERTERS.get(cls)
    if converters is None:
        hints = get_type_hints(cls)
        converters = _CONVERTERS[cls] = tuple(
            (f.name, _converter(hints[f.name])) for f in fields(cast(Any, cls))
        )
    out: dict[str, Any] = {}
    for name, convert in converters:
        if name in given:
            out[name] = given[name]
            continue
        try:  # not ``name in values``: a row's membership test costs more than its look-up
            v = values[name]
        except KeyError:
            continue
        out[name] = v if convert is None else convert(v)
    return cls(**out)


# -- writing: the reverse, field by field --------------------------------------------------------
def _column(value: Any) -> Any:
    if isinstance(value, IntEnum):
        return int(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Owner):
        return owner_json(value)
    if isinstance(value, Mapping):
        return jsonable(dict(value))
    return value


def row_of(record: Any, **extra: Any) -> dict[str, Any]:
    """The columns of a record (its fields, plain), with ``extra`` columns added. Not a dataclass:
    ``field_names`` raises TypeError (``fields()`` checks it, once per type)."""
    out = {}
    for name in field_names(record):
        v = getattr(record, name)
        out[name] = v if type(v) in AS_IS else _column(v)
    out.update(extra)
    return out


# -- the records of each table -------------------------------------------------------------------
def ladder_of(r: Row[Any]) -> LadderState:
    return record_of(LadderState, r._mapping)


def decision_row(d: Decision) -> dict[str, Any]:
    return row_of(d)


def decision_of(r: Row[Any]) -> Decision:
    return record_of(Decision, r._mapping)


def action_of(r: Row[Any]) -> Action:
    return record_of(Action, r._mapping)


def approval_of(r: Row[Any]) -> ApprovalRecord:
    return record_of(ApprovalRecord, r._mapping)


def snooze_of(r: Row[Any]) -> SnoozeRecord:
    return record_of(SnoozeRecord, r._mapping)


def audit_of(r: Row[Any]) -> AuditRecord:
    return record_of(AuditRecord, r._mapping)


def finding_row(f: Finding, subject: str, at: datetime) -> dict[str, Any]:
    """An episode's columns for its latest finding (``at`` is stored as ``last_seen_at``)."""
    row = row_of(f, subject=subject, last_seen_at=at)
    del row["at"]
    return row


def episode_of(r: Row[Any]) -> FindingEpisode:
    # JSON has no NaN: a null stored for a missing aggregate comes back as NaN.
    evidence = {
        outer: {inner: math.nan if v is None else float(v) for inner, v in values.items()}
        for outer, values in r.evidence.items()
    }
    finding = record_of(Finding, r._mapping, at=r.last_seen_at, evidence=evidence)
    return FindingEpisode(r.id, finding, r.first_seen_at, r.last_seen_at, r.ended_at)


def notice_row(n: Notice, sent: bool) -> dict[str, Any]:
    return row_of(n, sent=sent)


def notice_of(r: Row[Any]) -> NoticeRecord:
    return NoticeRecord(r.id, record_of(Notice, r._mapping), r.sent)


def workload_row(w: Workload) -> dict[str, Any]:
    """The snapshot columns that ``remember_workloads`` compares to see whether anything changed."""
    return {
        "kind": w.kind.value,
        "name": w.name,
        "source": w.source,
        "owner": owner_json(w.owner),
        "gpu_uuids": list(w.gpu_uuids),
        "labels": dict(w.labels),
        "annotations": dict(w.annotations),
        "started_at": w.started_at.astimezone(UTC),
    }


def workload_of(r: Row[Any]) -> WorkloadRecord:
    return record_of(WorkloadRecord, r._mapping)
