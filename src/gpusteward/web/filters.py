"""The query parameters of each listing (findings, actions, audit, approvals, false kills), parsed
once.

The JSON API and the pages take the same dependency, so a filter's type, bound and default is
written in one place. Every number is bounded to what a 64-bit column can hold (a larger one
used to reach the database and give 500), and every closed set of values is an enum: an unknown
``status`` or ``level`` is a 422, not an empty list. The page forms send ``""`` for "all", so an
empty value means no filter.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Literal

from fastapi import Path, Query
from pydantic import BeforeValidator

from gpusteward.domain.models import ActionStatus, ApprovalStatus

#: The largest id a 64-bit signed column holds.
MAX_ID = 2**63 - 1
#: Free-text filters: longer than any id, name or search a person types.
MAX_TEXT = 500
#: Rows a page of findings, actions or the audit log unless ``limit`` says otherwise: a screenful
#: or two to scroll, with keyset links to the older ones (findings were 500: 257 KB of HTML).
PAGE_ROWS = 200

Text = Annotated[str, Query(max_length=MAX_TEXT)]
Before = Annotated[
    int | None,
    Query(ge=1, le=MAX_ID, description="Only rows older than this id: the `x-next-before` of the last page."),
]
ApprovalId = Annotated[int, Path(ge=1, le=MAX_ID, description="The approval request's id.")]


class LevelLabel(StrEnum):
    """The intervention levels a listing can be filtered by (as labels, ``L2``)."""

    L1 = "L1"
    L2 = "L2"
    L3 = "L3"
    L4 = "L4"


def _blank_is_none(value: object) -> object:
    return None if value == "" else value


#: One of a closed set, or nothing: "" (what a form's "all" sends) is no filter.
Status = Annotated[ActionStatus | None, BeforeValidator(_blank_is_none), Query()]
Level = Annotated[LevelLabel | None, BeforeValidator(_blank_is_none), Query()]
ApprovalState = Annotated[ApprovalStatus | None, BeforeValidator(_blank_is_none), Query()]


def _value(v: StrEnum | None) -> str:
    return "" if v is None else v.value


@dataclass(frozen=True)
class FindingQuery:
    kind: str
    owner: str
    team: str
    node: str
    status: Literal["open", "all"]
    limit: int
    before: int | None

    def filters(self) -> dict[str, str]:
        """The filters as the page's form shows them (no paging)."""
        return {"kind": self.kind, "owner": self.owner, "team": self.team, "node": self.node,
                "status": self.status}  # fmt: skip


def finding_query(
    kind: Text = "",
    owner: Text = "",
    team: Text = "",
    node: Text = "",
    status: Literal["open", "all"] = "open",
    limit: Annotated[
        int, Query(ge=1, le=5000, description="Rows a page; the `Link` header names the next page.")
    ] = PAGE_ROWS,
    before: Before = None,
) -> FindingQuery:
    return FindingQuery(kind, owner, team, node, status, limit, before)


@dataclass(frozen=True)
class ActionQuery:
    q: str
    status: str
    level: str
    workload: str
    #: None: the caller did not ask (the API's CSV export then takes every match).
    limit: int | None
    before: int | None

    def filters(self) -> dict[str, str]:
        return {"q": self.q, "status": self.status, "level": self.level, "workload": self.workload}

    @property
    def page_size(self) -> int:
        return self.limit or PAGE_ROWS


def action_query(
    q: Text = "",
    status: Status = None,
    level: Level = None,
    workload: Text = "",
    limit: Annotated[int | None, Query(ge=1, le=10_000)] = None,
    before: Before = None,
) -> ActionQuery:
    return ActionQuery(q, _value(status), _value(level), workload, limit, before)


@dataclass(frozen=True)
class AuditQuery:
    q: str
    event: str
    workload: str
    limit: int | None
    before: int | None

    def filters(self) -> dict[str, str]:
        return {"q": self.q, "event": self.event, "workload": self.workload}

    @property
    def page_size(self) -> int:
        return self.limit or PAGE_ROWS


def audit_query(
    q: Text = "",
    event: Annotated[
        str, Query(max_length=200, description="An event name or its prefix (`approval.`).")
    ] = "",
    workload: Text = "",
    limit: Annotated[int | None, Query(ge=1, le=10_000)] = None,
    before: Before = None,
) -> AuditQuery:
    return AuditQuery(q, event, workload, limit, before)


@dataclass(frozen=True)
class ApprovalQuery:
    #: None: every status.
    status: ApprovalStatus | None
    limit: int


def approval_query(
    status: ApprovalState = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> ApprovalQuery:
    return ApprovalQuery(status, limit)


class FalseKillStatus(StrEnum):
    SUSPECTED = "suspected"
    CONFIRMED = "confirmed"
    DISMISSED = "dismissed"


FalseKillState = Annotated[FalseKillStatus | None, BeforeValidator(_blank_is_none), Query()]
FalseKillId = Annotated[int, Path(ge=1, le=MAX_ID, description="The suspected false kill's id.")]
ScopeName = Annotated[
    str, Path(max_length=63, pattern=r"^[a-z0-9][a-z0-9._-]*$", description="A roll-out scope's name.")
]


@dataclass(frozen=True)
class FalseKillQuery:
    status: str
    scope: str
    limit: int

    def filters(self) -> dict[str, str]:
        return {"status": self.status, "scope": self.scope}


def false_kill_query(
    status: FalseKillState = None,
    scope: Text = "",
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> FalseKillQuery:
    return FalseKillQuery(_value(status), scope, limit)
