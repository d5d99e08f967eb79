"""The hub's tables (PostgreSQL, in the schema ``store_schema`` names; the connection's
``search_path`` puts them there, so the tables carry no schema of their own).

Each row is keyed by the member's cluster name. Members' rows (findings, actions) are kept as
the member's JSON with the few columns the hub sorts and filters by.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

md = MetaData()

#: One row per member: when it was last tried, last answered, and why it failed.
members_t = Table(
    "hub_members",
    md,
    Column("cluster", String(63), primary_key=True),
    Column("url", String(500), nullable=False),
    Column("remote_name", String(63), nullable=False, default=""),
    Column("last_attempt_at", DateTime(timezone=True)),
    Column("last_success_at", DateTime(timezone=True)),
    Column("failures", Integer, nullable=False, default=0),
    Column("last_error", Text, nullable=False, default=""),
)

#: The latest answer of each member endpoint (overview, fleet, rollout, settings).
snapshots_t = Table(
    "hub_snapshots",
    md,
    Column("cluster", String(63), primary_key=True),
    Column("kind", String(32), primary_key=True),
    Column("pulled_at", DateTime(timezone=True), nullable=False),
    Column("body", JSON, nullable=False),
)

#: One row per member per successful pull: the figures the overview charts over time.
samples_t = Table(
    "hub_samples",
    md,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("cluster", String(63), nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("gpus", Integer),
    Column("idle_gpus", Integer),
    Column("util_pct", Float),
    Column("waste_cost_per_hour", Float),
    Column("jobs_waiting", Integer),
    Column("queue_p50_s", Float),
    Index("ix_hub_samples_cluster_at", "cluster", "at"),
)

#: Per member, pull and GPU model: GPUs seen, free and idle (cross-cluster advice).
model_samples_t = Table(
    "hub_model_samples",
    md,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("cluster", String(63), nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("model", String(255), nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("free_gpus", Integer, nullable=False),
    Column("idle_gpus", Integer, nullable=False),
    Index("ix_hub_model_samples_at", "at"),
)

#: Every job a member's queue showed waiting, once, with how long it had waited when last seen.
waits_t = Table(
    "hub_waits",
    md,
    Column("cluster", String(63), primary_key=True),
    Column("job_id", String(255), primary_key=True),
    Column("gpu_model", String(255), nullable=False),
    Column("queue", String(255), nullable=False),
    Column("user_name", String(255), nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("submitted_at", DateTime(timezone=True), nullable=False),
    Column("last_seen_at", DateTime(timezone=True), nullable=False),
    Column("waited_s", Float, nullable=False),
    Index("ix_hub_waits_last_seen_at", "last_seen_at"),
)

#: The members' open findings as they last answered (replaced whole per pull).
findings_t = Table(
    "hub_findings",
    md,
    Column("cluster", String(63), primary_key=True),
    Column("id", BigInteger, primary_key=True),
    Column("last_seen_at", DateTime(timezone=True)),
    Column("body", JSON, nullable=False),
)

#: The members' actions, pulled incrementally (newest pages until an id already held).
actions_t = Table(
    "hub_actions",
    md,
    Column("cluster", String(63), primary_key=True),
    Column("id", BigInteger, primary_key=True),
    Column("created_at", DateTime(timezone=True)),
    Column("body", JSON, nullable=False),
)

#: The members' showback per month (``GET /api/v1/showback``), where they have it.
showback_t = Table(
    "hub_showback",
    md,
    Column("cluster", String(63), primary_key=True),
    Column("month", String(7), primary_key=True),
    Column("pulled_at", DateTime(timezone=True), nullable=False),
    Column("body", JSON, nullable=False),
)
