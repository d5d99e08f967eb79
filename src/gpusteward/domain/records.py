"""What the state store keeps and gives back, declared once for every implementation (SQL in
``store/``, in memory in ``store/memory``) and for every reader (CLI, web, reports).

``to_dict`` comes from the fields (``plain``): a new field shows in the JSON and tables, no list to sync.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from datetime import date, datetime
from enum import Enum
from typing import Any

from gpusteward.domain.models import ApprovalStatus, Finding, Level, Notice, Owner, Workload, WorkloadKind

_RETRY = re.compile(r"~r(\d+)$")


def jsonable(value: Any) -> Any:
    """Plain JSON: NaN and infinities become null (PostgreSQL rejects them), the rest ``str()``."""
    try:
        return json_walk(value)
    except NotPlain:
        return json.loads(json.dumps(value, default=str), parse_constant=lambda _: None)


class NotPlain(Exception):
    """A value ``json_walk`` leaves to the JSON round trip (its ``default`` decides)."""


_SCALARS = frozenset({str, int, bool, type(None)})


def json_walk(value: Any, other: Callable[[Any], Any] | None = None) -> Any:
    """What ``json.loads(json.dumps(value))`` gives, NaN and infinities as null, without the
    text in between (the pages turn hundreds of records a request into JSON). Only the exact
    JSON types are walked; ``other`` may convert a leaf (else ``NotPlain`` is raised: the
    caller falls back to the round trip, so the answer stays the round trip's)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:  # json.dumps would turn it into text
                raise NotPlain
            out[k] = json_walk(v, other)
        return out
    if kind is list or kind is tuple:
        return [json_walk(v, other) for v in value]
    if other is not None:
        return other(value)
    raise NotPlain


def plain(record: Any, *, inline: Iterable[str] = (), skip: Iterable[str] = ()) -> dict[str, Any]:
    """A dataclass as flat plain data for tables and JSON output, field by field: a level as its
    label, other enums as their value, tuples as lists, mappings made JSON-safe (NaN → null),
    nested records as dicts, or merged in when named in ``inline``; times stay aware datetimes."""
    inlined, skipped = frozenset(inline), frozenset(skip)
    out: dict[str, Any] = {}
    for name in field_names(record):
        if name in skipped:
            continue
        value = getattr(record, name)
        if name in inlined:
            out.update(plain(value, skip=skipped))
        elif type(value) in AS_IS:
            out[name] = value
        else:
            out[name] = _plain_value(value)
    return out


#: Kept as they are in plain data and table rows, by exact type (an ``IntEnum`` goes by value).
AS_IS = frozenset({str, int, float, bool, type(None), datetime})
_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


def field_names(record: Any) -> tuple[str, ...]:
    """A dataclass's field names, kept per type (``fields()`` builds its tuple at each call)."""
    names = _FIELD_NAMES.get(type(record))
    if names is None:
        names = _FIELD_NAMES[type(record)] = tuple(f.name for f in fields(record))
    return names


def _plain_value(value: Any) -> Any:
    if isinstance(value, Level):
        return value.label
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [v if type(v) in AS_IS else _plain_value(v) for v in value]
    if isinstance(value, Mapping):
        return jsonable(dict(value))
    if is_dataclass(value) and not isinstance(value, type):
        return plain(value)
    return value


def base_key(approval_key: str) -> str:
    """The action idempotency key an approval request is for (``<key>~rN`` is its N-th request,
    see ``policy.owner.approval_key``)."""
    m = _RETRY.search(approval_key)
    return approval_key if m is None else approval_key[: m.start()]


def episode_subject(f: Finding) -> str:
    """What an episode is about: the workload, or the GPUs for waste that no workload holds."""
    return f.workload_id if f.workload_id is not None else "gpus:" + ",".join(sorted(f.gpu_uuids))


def episode_waste(f: Finding, minutes: float) -> dict[str, float]:
    """An episode's waste for ``minutes`` of waste on the finding's GPUs at its price. A finding
    sees only its window; the episode keeps adding the time since it was last seen."""
    gpu_hours = minutes / 60 * len(f.gpu_uuids)
    per_gpu_hour = f.wasted_cost / f.wasted_gpu_hours if f.wasted_gpu_hours > 0 else 0.0
    return {"wasted_minutes": minutes, "wasted_gpu_hours": gpu_hours, "wasted_cost": gpu_hours * per_gpu_hour}


# -- the loop's own state ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PauseState:
    paused: bool
    by: str = ""
    reason: str = ""
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class FindingEpisode:
    """One continuous stretch of one rule's finding on one workload; open while ``ended_at`` is None."""

    id: int
    #: The latest finding of the episode (its ``at`` is the episode's ``last_seen_at``).
    finding: Finding
    first_seen_at: datetime
    last_seen_at: datetime
    ended_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return plain(self, inline=("finding",), skip=("at",))


@dataclass(frozen=True, slots=True)
class NoticeRecord:
    id: int
    notice: Notice
    sent: bool

    def to_dict(self) -> dict[str, Any]:
        return plain(self, inline=("notice",))


@dataclass(frozen=True, slots=True)
class AuditRecord:
    id: int
    at: datetime
    event: str
    workload_id: str | None
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AuditNote:
    """The audit record of an action's state change (its workload comes from the action), written
    with the change itself: a crash or a failed write leaves both or neither."""

    event: str
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """What was last seen of a workload, kept for ``explain`` after it ended."""

    id: str
    kind: WorkloadKind
    name: str
    owner: Owner
    gpu_uuids: tuple[str, ...]
    started_at: datetime
    first_seen_at: datetime
    last_seen_at: datetime
    source: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    def to_workload(self) -> Workload:
        """The workload as last seen (it may have ended since), e.g. to account for a stop
        that completed after the workload left the source."""
        return Workload(
            id=self.id,
            kind=self.kind,
            name=self.name,
            owner=self.owner,
            gpus_requested=len(self.gpu_uuids),
            gpu_uuids=self.gpu_uuids,
            started_at=self.started_at,
            source=self.source,
            labels=self.labels,
            annotations=self.annotations,
        )

    def to_dict(self) -> dict[str, Any]:
        return plain(self, inline=("owner",))


# -- owner and admin controls -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One request to carry out a high-level step, and what a person decided about it."""

    id: int
    idempotency_key: str
    dry_run: bool
    workload_id: str
    level: Level
    step: str
    rule: str
    reason: str
    gpu_uuids: tuple[str, ...]
    status: ApprovalStatus
    requested_at: datetime
    expires_at: datetime
    decided_by: str = ""
    decided_at: datetime | None = None
    decision_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return plain(self)


@dataclass(frozen=True, slots=True)
class SnoozeRecord:
    """A workload left alone (nothing beyond recording) until ``until``."""

    id: int
    workload_id: str
    created_at: datetime
    until: datetime
    by: str
    reason: str
    ended_at: datetime | None = None

    def active(self, at: datetime) -> bool:
        return self.ended_at is None and self.created_at <= at < self.until

    def to_dict(self) -> dict[str, Any]:
        return plain(self)


# -- the ledger's amounts (store.ledger) ------------------------------------------------------
def day_key(d: date | datetime) -> str:
    return (d.date() if isinstance(d, datetime) else d).isoformat()


@dataclass(frozen=True, slots=True, order=True)
class DailyKey:
    day: str
    currency: str
    user: str
    team: str
    kind: str


@dataclass(slots=True)
class DailyAmounts:
    waste_gpu_hours: float = 0.0
    waste_cost: float = 0.0
    waste_kwh: float = 0.0
    saved_gpu_hours: float = 0.0
    saved_cost: float = 0.0
    stops: int = 0


@dataclass(frozen=True, slots=True, order=True)
class UsageKey:
    day: str
    workload_id: str


@dataclass(slots=True)
class UsageAmounts:
    """One workload's GPU use on one day. Hours count only samples the source had."""

    user: str
    team: str
    gpus_requested: int = 0
    gpus_held: int = 0
    held_gpu_hours: float = 0.0
    #: Utilisation-weighted: an hour at 50 % is half a busy GPU-hour.
    busy_gpu_hours: float = 0.0
    advise_idle_gpus: int = 0


@dataclass(frozen=True, slots=True)
class Mark:
    """Counted up to ``until`` (waste on one GPU, savings of one stop); ``data`` says what for."""

    key: str
    until: datetime
    data: Mapping[str, Any] = field(default_factory=dict)


# -- showback (store.showback): per day, team, owner, GPU model and rate -----------------------
@dataclass(frozen=True, slots=True, order=True)
class ShowbackKey:
    day: str
    team: str
    user: str
    gpu_model: str
    #: The rate the GPU-hours are priced at: on-demand, reserved or spot (``analysis.cost.RATES``).
    rate: str
    currency: str


@dataclass(slots=True)
class ShowbackAmounts:
    """GPU-hours and money of one showback key. Hours count only samples the source had."""

    #: GPU-hours held by a workload (or, for "(unallocated)", by nobody).
    held_gpu_hours: float = 0.0
    #: Utilisation-weighted: an hour at 50 % is half a used GPU-hour.
    used_gpu_hours: float = 0.0
    #: GPU-hours a waste rule counted (the waste ledger's hours, split by GPU model).
    wasted_gpu_hours: float = 0.0
    #: GPU-hours freed by stops, credited as the savings ledger credits them.
    reclaimed_gpu_hours: float = 0.0
    #: The held GPU-hours at the GPU's price per hour for its rate, in ``currency``.
    spend: float = 0.0
    #: Measured energy of the held GPUs (0 where the source has no power reading).
    kwh: float = 0.0
    #: ``kwh`` at the configured electricity price (0 where none is set).
    power_cost: float = 0.0


@dataclass(frozen=True, slots=True)
class ShowbackRow:
    key: ShowbackKey
    amounts: ShowbackAmounts


def month_of(day: str) -> str:
    """The month (YYYY-MM) of a day key (YYYY-MM-DD)."""
    return day[:7]


SHOWBACK_AMOUNTS = tuple(f.name for f in fields(ShowbackAmounts))


def add_showback(into: ShowbackAmounts, more: ShowbackAmounts) -> None:
    for name in SHOWBACK_AMOUNTS:
        setattr(into, name, getattr(into, name) + getattr(more, name))


def month_start(month: str) -> date:
    """The first day of ``month`` (YYYY-MM); ValueError naming the expected form otherwise."""
    try:
        if len(month) != 7 or month[4] != "-":
            raise ValueError
        return date(int(month[:4]), int(month[5:]), 1)
    except ValueError:
        raise ValueError(f"not a month: {month!r} (expected YYYY-MM, e.g. 2026-11)") from None


def next_month(month: str) -> str:
    first = month_start(month)
    return f"{first.year + first.month // 12:04d}-{first.month % 12 + 1:02d}"


def check_closable(month: str, at: datetime) -> None:
    """A month can be closed once it has ended (UTC): its figures are final then."""
    if at.date() < month_start(next_month(month)):
        raise ValueError(f"{month} has not ended yet (now {at.date().isoformat()}): close it after")


def move_late(
    showback: Mapping[ShowbackKey, ShowbackAmounts], closed: Iterable[str], late_day: str | None
) -> dict[ShowbackKey, ShowbackAmounts]:
    """The amounts with those of a closed month moved to ``late_day`` (the day they arrive):
    a closed month's rows are never rewritten. Without a ``late_day`` nothing moves."""
    shut = set(closed)
    if late_day is not None and month_of(late_day) in shut:
        # A clock behind the closing: the first day after the last closed month instead.
        late_day = month_start(next_month(max(shut))).isoformat()
    out: dict[ShowbackKey, ShowbackAmounts] = {}
    for key, amounts in showback.items():
        if late_day is not None and month_of(key.day) in shut:
            key = replace(key, day=late_day)
        acc = out.setdefault(key, ShowbackAmounts())
        add_showback(acc, amounts)
    return out
