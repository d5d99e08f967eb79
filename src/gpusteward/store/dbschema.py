"""Tables and the UTC datetime type of the SQL state store (``store.db``).

Portable SQLAlchemy Core: the same schema runs on SQLite and PostgreSQL. Times are stored
as naive UTC (SQLite keeps no zone) and come back timezone-aware. Columns are named after the
fields of the records they hold (``domain.records``, ``domain.models``): ``store.rows`` maps
both ways from those names.
"""

from __future__ import annotations

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
from sqlalchemy.types import TypeDecorator

# Records and row mappers once lived here; re-exported for the listings that import them from here.
from gpusteward.domain.records import AuditRecord
from gpusteward.store.rows import action_of, episode_of, workload_of

__all__ = ["AuditRecord", "action_of", "episode_of", "workload_of"]


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
# Showback (store.showback): GPU-hours and spend per day, team, owner, GPU model and rate; months
# once closed are frozen (amounts that arrive later go to the day they arrive).
ledger_showback_t = Table(
    "ledger_showback",
    md,
    _pk(),
    Column("day", String(10), nullable=False, index=True),  # YYYY-MM-DD, UTC
    _text("team", 255),
    _text("user_name", 255),
    _text("gpu_model", 255),
    _text("rate", 16),
    _text("currency", 8),
    Column("held_gpu_hours", Float, nullable=False, default=0.0),
    Column("used_gpu_hours", Float, nullable=False, default=0.0),
    Column("wasted_gpu_hours", Float, nullable=False, default=0.0),
    Column("reclaimed_gpu_hours", Float, nullable=False, default=0.0),
    Column("spend", Float, nullable=False, default=0.0),
    Column("kwh", Float, nullable=False, default=0.0),
    Column("power_cost", Float, nullable=False, default=0.0),
    UniqueConstraint("day", "team", "user_name", "gpu_model", "rate", "currency", name="uq_ledger_showback"),
)
ledger_closed_months_t = Table(
    "ledger_closed_months",
    md,
    Column("month", String(7), primary_key=True),  # YYYY-MM
    _at("closed_at", nullable=False),
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
# Queue time (issue 16, store.queue_waits): one row per started job, however many ticks saw it.
queue_waits_t = Table(
    "queue_waits",
    md,
    Column("source", String(64), primary_key=True),
    _id("job_id", primary_key=True),
    _text("queue", 255),
    _int("gpus"),
    Column("waited_s", Float, nullable=False),
    _at("started_at", nullable=False, index=True),
)
