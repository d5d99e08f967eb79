"""Tables, the UTC datetime type and the records of the SQL state store (``store.db``).

Portable SQLAlchemy Core: the same schema runs on SQLite and PostgreSQL. Times are stored
as naive UTC (SQLite keeps no zone) and come back timezone-aware.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Row
from sqlalchemy.types import TypeDecorator

from gpusteward.domain.models import (
    Action,
    ActionStatus,
    Decision,
    Finding,
    Hold,
    LadderState,
    Level,
    Notice,
    Owner,
    RuleAction,
    Workload,
    WorkloadKind,
)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware datetimes in, naive UTC stored, aware UTC out. Naive input is a bug: refused."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: gpusteward stores only timezone-aware times")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


def _id(name: str, **kw: Any) -> Column[str]:
    return Column(name, String(255), **kw)


def _at(name: str, **kw: Any) -> Column[datetime]:
    return Column(name, UTCDateTime, **kw)


def _text(name: str, length: int | None = None) -> Column[str]:
    return Column(name, String(length) if length else Text, nullable=False, default="")


def _int(name: str) -> Column[int]:
    return Column(name, Integer, nullable=False)


def _json(name: str, nullable: bool = False) -> Column[Any]:
    return Column(name, JSON, nullable=nullable)


def _pk() -> Column[int]:
    return Column("id", Integer, primary_key=True, autoincrement=True)


md = MetaData()
settings_t = Table("settings", md, Column("key", String(64), primary_key=True), _json("value"))
ladders_t = Table(
    "ladders",
    md,
    _id("workload_id", primary_key=True),
    Column("dry_run", Boolean, primary_key=True),
    _text("incarnation", 64),
    _text("rule", 255),
    _at("first_seen_at", nullable=False),
    _at("last_seen_at", nullable=False),
    _text("step", 32),
    _at("step_at"),
    _at("first_warned_at"),
    _at("clean_since"),
)
episodes_t = Table(
    "finding_episodes",
    md,
    _pk(),
    # The workload id, or the GPUs for waste that no workload holds.
    _text("subject"),
    _id("workload_id", index=True),
    _text("rule", 255),
    _text("kind", 64),
    _text("action", 16),
    _json("gpu_uuids"),
    _json("evidence"),
    _text("message"),
    _at("first_seen_at", nullable=False),
    _at("last_seen_at", nullable=False),
    _at("ended_at", index=True),
    Column("wasted_minutes", Float, nullable=False),
    Column("wasted_gpu_hours", Float, nullable=False),
    Column("wasted_cost", Float, nullable=False),
)
decisions_t = Table(
    "decisions",
    md,
    _pk(),
    _id("workload_id", nullable=False),
    _at("at", nullable=False),
    _int("level"),
    _text("step", 32),
    _text("hold", 32),
    _text("reason"),
    _text("rule", 255),
    _json("gpu_uuids"),
    _text("idempotency_key", 512),
    Index("ix_decisions_workload", "workload_id", "id"),
)
actions_t = Table(
    "actions",
    md,
    _pk(),
    _text("idempotency_key", 512),
    Column("dry_run", Boolean, nullable=False),
    _id("workload_id", nullable=False, index=True),
    _int("level"),
    _text("step", 32),
    _text("rule", 255),
    _text("status", 16),
    _at("created_at", nullable=False, index=True),
    _at("updated_at", nullable=False),
    _int("attempts"),
    _text("detail"),
    _json("gpu_uuids"),
    _int("gpu_count"),
    # When a two-phase stop's follow-up is due (revision 0002); NULL for every other action.
    _at("due_at", nullable=True),
    # Per mode: a dry run must not use up the key of the real action taken after switching to enforce.
    UniqueConstraint("dry_run", "idempotency_key", name="uq_actions_key"),
)
notices_t = Table(
    "notices",
    md,
    _pk(),
    _at("at", nullable=False),
    _id("workload_id", nullable=False, index=True),
    _json("owner", nullable=True),
    _text("subject"),
    _text("body"),
    _int("level"),
    _text("dedup_key", 512),
    Column("sent", Boolean, nullable=False),
)
audit_t = Table(
    "audit_log",
    md,
    _pk(),
    _at("at", nullable=False),
    _text("event", 64),
    _id("workload_id", index=True),
    _json("payload"),
    # Hash chain (store.audit_chain): position, the previous record's hash, SHA-256 of this one.
    # Null only on records written before the chain existed; a unique seq cannot fork.
    Column("seq", Integer, nullable=True),
    Column("prev_hash", String(64), nullable=True),
    Column("hash", String(64), nullable=True),
    UniqueConstraint("seq", name="uq_audit_seq"),
)
workloads_t = Table(
    "workloads",
    md,
    _id("id", primary_key=True),
    _text("kind", 16),
    _text("name"),
    _text("source", 64),
    _json("owner"),
    _json("gpu_uuids"),
    _json("labels"),
    _json("annotations"),
    _at("started_at", nullable=False),
    _at("first_seen_at", nullable=False),
    _at("last_seen_at", nullable=False, index=True),
)
# The waste and savings ledger (store.ledger): money per day, owner and team; usage per workload.
ledger_daily_t = Table(
    "ledger_daily",
    md,
    _pk(),
    Column("day", String(10), nullable=False, index=True),  # YYYY-MM-DD, UTC
    _text("currency", 8),
    _text("user_name", 255),
    _text("team", 255),
    _text("kind", 64),
    Column("waste_gpu_hours", Float, nullable=False, default=0.0),
    Column("waste_cost", Float, nullable=False, default=0.0),
    Column("waste_kwh", Float, nullable=False, default=0.0),
    Column("saved_gpu_hours", Float, nullable=False, default=0.0),
    Column("saved_cost", Float, nullable=False, default=0.0),
    Column("stops", Integer, nullable=False, default=0),
    UniqueConstraint("day", "currency", "user_name", "team", "kind", name="uq_ledger_daily"),
)
ledger_usage_t = Table(
    "ledger_usage",
    md,
    _pk(),
    Column("day", String(10), nullable=False, index=True),
    _id("workload_id", nullable=False),
    _text("user_name", 255),
    _text("team", 255),
    Column("gpus_requested", Integer, nullable=False, default=0),
    Column("gpus_held", Integer, nullable=False, default=0),
    Column("held_gpu_hours", Float, nullable=False, default=0.0),
    Column("busy_gpu_hours", Float, nullable=False, default=0.0),
    # The most GPUs an advice rule (over-provisioned) found idle that day.
    Column("advise_idle_gpus", Integer, nullable=False, default=0),
    UniqueConstraint("day", "workload_id", name="uq_ledger_usage"),
)
ledger_marks_t = Table(
    "ledger_marks",
    md,
    Column("key", String(512), primary_key=True),
    _at("until", nullable=False),
    _json("data"),
)

# Owner and admin controls (store.controls): approvals of high-level actions, snoozes.
approvals_t = Table(
    "approvals",
    md,
    _pk(),
    _text("idempotency_key", 512),
    Column("dry_run", Boolean, nullable=False),
    _id("workload_id", nullable=False, index=True),
    _int("level"),
    _text("step", 32),
    _text("rule", 255),
    _text("reason"),
    _json("gpu_uuids"),
    # pending → approved → used | rejected | expired
    _text("status", 16),
    _at("requested_at", nullable=False),
    _at("expires_at", nullable=False),
    _text("decided_by", 255),
    _at("decided_at"),
    _text("decision_reason"),
    UniqueConstraint("dry_run", "idempotency_key", name="uq_approvals_key"),
)
snoozes_t = Table(
    "snoozes",
    md,
    _pk(),
    _id("workload_id", nullable=False, index=True),
    _at("created_at", nullable=False),
    _at("until", nullable=False),
    _text("by", 255),
    _text("reason"),
    # Set when a snooze is lifted early or replaced by a newer one.
    _at("ended_at"),
)
# Web access (issue 8): API tokens stored hashed, and single-use signed links already used.
api_tokens_t = Table(
    "api_tokens",
    md,
    _pk(),
    Column("name", String(255), nullable=False, unique=True),
    _text("role", 16),
    Column("token_hash", String(128), nullable=False, unique=True),
    _at("created_at", nullable=False),
    _at("last_used_at"),
    _at("revoked_at"),
)
used_links_t = Table(
    "used_links",
    md,
    Column("nonce", String(128), primary_key=True),
    _text("purpose", 64),
    _at("used_at", nullable=False),
)


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
        """Flat plain data for tables and JSON output (times stay aware ``datetime``s)."""
        f = self.finding
        return {
            "id": self.id,
            "workload_id": f.workload_id,
            "rule": f.rule,
            "kind": f.kind,
            "action": f.action.value,
            "gpu_uuids": list(f.gpu_uuids),
            "first_seen_at": self.first_seen_at,
            "last_seen_at": self.last_seen_at,
            "ended_at": self.ended_at,
            "wasted_minutes": f.wasted_minutes,
            "wasted_gpu_hours": f.wasted_gpu_hours,
            "wasted_cost": f.wasted_cost,
            "message": f.message,
            "evidence": jsonable(f.evidence),
        }


@dataclass(frozen=True, slots=True)
class NoticeRecord:
    id: int
    notice: Notice
    sent: bool

    def to_dict(self) -> dict[str, Any]:
        n = self.notice
        return {
            "id": self.id,
            "at": n.at,
            "workload_id": n.workload_id,
            "owner": owner_json(n.owner),
            "subject": n.subject,
            "body": n.body,
            "level": n.level.label,
            "dedup_key": n.dedup_key,
            "sent": self.sent,
        }


@dataclass(frozen=True, slots=True)
class AuditRecord:
    id: int
    at: datetime
    event: str
    workload_id: str | None
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
        """Flat plain data for tables and JSON output (times stay aware ``datetime``s)."""
        return {
            "id": self.id,
            "kind": self.kind.value,
            "name": self.name,
            "user": self.owner.user,
            "team": self.owner.team,
            "contact": self.owner.contact,
            "gpu_uuids": list(self.gpu_uuids),
            "started_at": self.started_at,
            "first_seen_at": self.first_seen_at,
            "last_seen_at": self.last_seen_at,
            "source": self.source,
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
        }


def jsonable(value: Any) -> Any:
    """Plain JSON: NaN and infinities become null (PostgreSQL rejects them), the rest ``str()``."""
    return json.loads(json.dumps(value, default=str), parse_constant=lambda _: None)


def owner_json(owner: Owner | None) -> dict[str, Any] | None:
    return None if owner is None else {"user": owner.user, "team": owner.team, "contact": owner.contact}


def owner_of(value: dict[str, Any] | None) -> Owner | None:
    return None if value is None else Owner(value["user"], value.get("team", ""), value.get("contact"))


_LADDER_FIELDS = tuple(f.name for f in fields(LadderState))


def ladder_row(state: LadderState, dry_run: bool) -> dict[str, Any]:
    return {"dry_run": dry_run, **{name: getattr(state, name) for name in _LADDER_FIELDS}}


def ladder_of(r: Row[Any]) -> LadderState:
    return LadderState(**_columns(r, LadderState))


def finding_row(f: Finding, subject: str, at: datetime) -> dict[str, Any]:
    return {
        "subject": subject,
        "workload_id": f.workload_id,
        "rule": f.rule,
        "kind": f.kind,
        "action": f.action.value,
        "gpu_uuids": list(f.gpu_uuids),
        "evidence": jsonable(f.evidence),
        "message": f.message,
        "last_seen_at": at,
        "wasted_minutes": f.wasted_minutes,
        "wasted_gpu_hours": f.wasted_gpu_hours,
        "wasted_cost": f.wasted_cost,
    }


def episode_of(r: Row[Any]) -> FindingEpisode:
    # JSON has no NaN: a null stored for a missing aggregate comes back as NaN.
    evidence = {
        outer: {inner: math.nan if v is None else float(v) for inner, v in values.items()}
        for outer, values in r.evidence.items()
    }
    finding = Finding(
        rule=r.rule,
        kind=r.kind,
        action=RuleAction(r.action),
        at=r.last_seen_at,
        gpu_uuids=tuple(r.gpu_uuids),
        workload_id=r.workload_id,
        evidence=evidence,
        wasted_minutes=r.wasted_minutes,
        wasted_gpu_hours=r.wasted_gpu_hours,
        wasted_cost=r.wasted_cost,
        message=r.message,
    )
    return FindingEpisode(r.id, finding, r.first_seen_at, r.last_seen_at, r.ended_at)


def _columns(r: Row[Any], cls: type[Any]) -> dict[str, Any]:
    """The row's values for the fields of dataclass ``cls`` (columns are named after fields)."""
    return {f.name: r._mapping[f.name] for f in fields(cls)}


def decision_row(d: Decision) -> dict[str, Any]:
    plain = {f.name: getattr(d, f.name) for f in fields(Decision)}
    return {**plain, "level": int(d.level), "hold": d.hold.value, "gpu_uuids": list(d.gpu_uuids)}


def decision_of(r: Row[Any]) -> Decision:
    values = _columns(r, Decision)
    return Decision(
        **{**values, "level": Level(r.level), "hold": Hold(r.hold), "gpu_uuids": tuple(r.gpu_uuids)}
    )


def action_of(r: Row[Any]) -> Action:
    typed = {"level": Level(r.level), "status": ActionStatus(r.status), "gpu_uuids": tuple(r.gpu_uuids)}
    return Action(**{**_columns(r, Action), **typed})


def notice_row(n: Notice, sent: bool) -> dict[str, Any]:
    return {
        "at": n.at,
        "workload_id": n.workload_id,
        "owner": owner_json(n.owner),
        "subject": n.subject,
        "body": n.body,
        "level": int(n.level),
        "dedup_key": n.dedup_key,
        "sent": sent,
    }


def notice_of(r: Row[Any]) -> NoticeRecord:
    notice = Notice(r.at, r.workload_id, owner_of(r.owner), r.subject, r.body, Level(r.level), r.dedup_key)
    return NoticeRecord(r.id, notice, r.sent)


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
    return WorkloadRecord(
        id=r.id,
        kind=WorkloadKind(r.kind),
        name=r.name,
        owner=owner_of(r.owner) or Owner(""),
        gpu_uuids=tuple(r.gpu_uuids),
        started_at=r.started_at,
        first_seen_at=r.first_seen_at,
        last_seen_at=r.last_seen_at,
        source=r.source,
        labels=dict(r.labels),
        annotations=dict(r.annotations),
    )
