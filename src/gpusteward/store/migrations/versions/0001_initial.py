"""The whole schema of gpusteward's state store as of issue 7 (every table in store.dbschema).

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Times are naive UTC ``DateTime`` columns (``dbschema.UTCDateTime`` converts at the edge).
A database made by the old ``create_all`` is adopted by ``store.schema.upgrade`` (missing tables
and the audit hash-chain columns added, then stamped at this revision), not by this script.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "actions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("idempotency_key", sa.String(length=512), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("workload_id", sa.String(length=255), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("step", sa.String(length=32), nullable=False),
        sa.Column("rule", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("gpu_uuids", sa.JSON(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("dry_run", "idempotency_key", name="uq_actions_key"),
    )
    op.create_index(op.f("ix_actions_created_at"), "actions", ["created_at"], unique=False)
    op.create_index(op.f("ix_actions_workload_id"), "actions", ["workload_id"], unique=False)
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("token_hash", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("last_used_at", sa.DateTime(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_table(
        "approvals",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("idempotency_key", sa.String(length=512), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("workload_id", sa.String(length=255), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("step", sa.String(length=32), nullable=False),
        sa.Column("rule", sa.String(length=255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("gpu_uuids", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("requested_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("decided_by", sa.String(length=255), nullable=False),
        sa.Column("decided_at", sa.DateTime(), nullable=True),
        sa.Column("decision_reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("dry_run", "idempotency_key", name="uq_approvals_key"),
    )
    op.create_index(op.f("ix_approvals_workload_id"), "approvals", ["workload_id"], unique=False)
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("event", sa.String(length=64), nullable=False),
        sa.Column("workload_id", sa.String(length=255), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=True),
        sa.Column("prev_hash", sa.String(length=64), nullable=True),
        sa.Column("hash", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("seq", name="uq_audit_seq"),
    )
    op.create_index(op.f("ix_audit_log_workload_id"), "audit_log", ["workload_id"], unique=False)
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("workload_id", sa.String(length=255), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("step", sa.String(length=32), nullable=False),
        sa.Column("hold", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("rule", sa.String(length=255), nullable=False),
        sa.Column("gpu_uuids", sa.JSON(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=512), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_decisions_workload", "decisions", ["workload_id", "id"], unique=False)
    op.create_table(
        "finding_episodes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("workload_id", sa.String(length=255), nullable=True),
        sa.Column("rule", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("gpu_uuids", sa.JSON(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.Column("wasted_minutes", sa.Float(), nullable=False),
        sa.Column("wasted_gpu_hours", sa.Float(), nullable=False),
        sa.Column("wasted_cost", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_finding_episodes_ended_at"), "finding_episodes", ["ended_at"], unique=False)
    op.create_index(
        op.f("ix_finding_episodes_workload_id"), "finding_episodes", ["workload_id"], unique=False
    )
    op.create_table(
        "ladders",
        sa.Column("workload_id", sa.String(length=255), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("incarnation", sa.String(length=64), nullable=False),
        sa.Column("rule", sa.String(length=255), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(), nullable=False),
        sa.Column("step", sa.String(length=32), nullable=False),
        sa.Column("step_at", sa.DateTime(), nullable=True),
        sa.Column("first_warned_at", sa.DateTime(), nullable=True),
        sa.Column("clean_since", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("workload_id", "dry_run"),
    )
    op.create_table(
        "ledger_daily",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("currency", sa.String(length=8), nullable=False),
        sa.Column("user_name", sa.String(length=255), nullable=False),
        sa.Column("team", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("waste_gpu_hours", sa.Float(), nullable=False),
        sa.Column("waste_cost", sa.Float(), nullable=False),
        sa.Column("waste_kwh", sa.Float(), nullable=False),
        sa.Column("saved_gpu_hours", sa.Float(), nullable=False),
        sa.Column("saved_cost", sa.Float(), nullable=False),
        sa.Column("stops", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("day", "currency", "user_name", "team", "kind", name="uq_ledger_daily"),
    )
    op.create_index(op.f("ix_ledger_daily_day"), "ledger_daily", ["day"], unique=False)
    op.create_table(
        "ledger_marks",
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("until", sa.DateTime(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "ledger_usage",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("workload_id", sa.String(length=255), nullable=False),
        sa.Column("user_name", sa.String(length=255), nullable=False),
        sa.Column("team", sa.String(length=255), nullable=False),
        sa.Column("gpus_requested", sa.Integer(), nullable=False),
        sa.Column("gpus_held", sa.Integer(), nullable=False),
        sa.Column("held_gpu_hours", sa.Float(), nullable=False),
        sa.Column("busy_gpu_hours", sa.Float(), nullable=False),
        sa.Column("advise_idle_gpus", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("day", "workload_id", name="uq_ledger_usage"),
    )
    op.create_index(op.f("ix_ledger_usage_day"), "ledger_usage", ["day"], unique=False)
    op.create_table(
        "notices",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("workload_id", sa.String(length=255), nullable=False),
        sa.Column("owner", sa.JSON(), nullable=True),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("dedup_key", sa.String(length=512), nullable=False),
        sa.Column("sent", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_notices_workload_id"), "notices", ["workload_id"], unique=False)
    op.create_table(
        "settings",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "snoozes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("workload_id", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("until", sa.DateTime(), nullable=False),
        sa.Column("by", sa.String(length=255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_snoozes_workload_id"), "snoozes", ["workload_id"], unique=False)
    op.create_table(
        "used_links",
        sa.Column("nonce", sa.String(length=128), nullable=False),
        sa.Column("purpose", sa.String(length=64), nullable=False),
        sa.Column("used_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("nonce"),
    )
    op.create_table(
        "workloads",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.JSON(), nullable=False),
        sa.Column("gpu_uuids", sa.JSON(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("annotations", sa.JSON(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_workloads_last_seen_at"), "workloads", ["last_seen_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_workloads_last_seen_at"), table_name="workloads")
    op.drop_table("workloads")
    op.drop_table("used_links")
    op.drop_index(op.f("ix_snoozes_workload_id"), table_name="snoozes")
    op.drop_table("snoozes")
    op.drop_table("settings")
    op.drop_index(op.f("ix_notices_workload_id"), table_name="notices")
    op.drop_table("notices")
    op.drop_index(op.f("ix_ledger_usage_day"), table_name="ledger_usage")
    op.drop_table("ledger_usage")
    op.drop_table("ledger_marks")
    op.drop_index(op.f("ix_ledger_daily_day"), table_name="ledger_daily")
    op.drop_table("ledger_daily")
    op.drop_table("ladders")
    op.drop_index(op.f("ix_finding_episodes_workload_id"), table_name="finding_episodes")
    op.drop_index(op.f("ix_finding_episodes_ended_at"), table_name="finding_episodes")
    op.drop_table("finding_episodes")
    op.drop_index("ix_decisions_workload", table_name="decisions")
    op.drop_table("decisions")
    op.drop_index(op.f("ix_audit_log_workload_id"), table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_index(op.f("ix_approvals_workload_id"), table_name="approvals")
    op.drop_table("approvals")
    op.drop_table("api_tokens")
    op.drop_index(op.f("ix_actions_workload_id"), table_name="actions")
    op.drop_index(op.f("ix_actions_created_at"), table_name="actions")
    op.drop_table("actions")
