"""The hub's tables: members, their latest answers, samples over time, waits, findings,
actions and showback.

Revision ID: h0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "h0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "hub_members",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("url", sa.String(500), nullable=False),
        sa.Column("remote_name", sa.String(63), nullable=False),
        sa.Column("last_attempt_at", TZ),
        sa.Column("last_success_at", TZ),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
    )
    op.create_table(
        "hub_snapshots",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("pulled_at", TZ, nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
    )
    op.create_table(
        "hub_samples",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(63), nullable=False),
        sa.Column("at", TZ, nullable=False),
        sa.Column("gpus", sa.Integer()),
        sa.Column("idle_gpus", sa.Integer()),
        sa.Column("util_pct", sa.Float()),
        sa.Column("waste_cost_per_hour", sa.Float()),
        sa.Column("jobs_waiting", sa.Integer()),
        sa.Column("queue_p50_s", sa.Float()),
    )
    op.create_index("ix_hub_samples_cluster_at", "hub_samples", ["cluster", "at"])
    op.create_table(
        "hub_model_samples",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(63), nullable=False),
        sa.Column("at", TZ, nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("free_gpus", sa.Integer(), nullable=False),
        sa.Column("idle_gpus", sa.Integer(), nullable=False),
    )
    op.create_index("ix_hub_model_samples_at", "hub_model_samples", ["at"])
    op.create_table(
        "hub_waits",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("job_id", sa.String(255), primary_key=True),
        sa.Column("gpu_model", sa.String(255), nullable=False),
        sa.Column("queue", sa.String(255), nullable=False),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("submitted_at", TZ, nullable=False),
        sa.Column("last_seen_at", TZ, nullable=False),
        sa.Column("waited_s", sa.Float(), nullable=False),
    )
    op.create_index("ix_hub_waits_last_seen_at", "hub_waits", ["last_seen_at"])
    for name, stamp in (("hub_findings", "last_seen_at"), ("hub_actions", "created_at")):
        op.create_table(
            name,
            sa.Column("cluster", sa.String(63), primary_key=True),
            sa.Column("id", sa.BigInteger(), primary_key=True),
            sa.Column(stamp, TZ),
            sa.Column("body", sa.JSON(), nullable=False),
        )
    op.create_table(
        "hub_showback",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("month", sa.String(7), primary_key=True),
        sa.Column("pulled_at", TZ, nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    for name in ("hub_showback", "hub_actions", "hub_findings", "hub_waits", "hub_model_samples"):
        op.drop_table(name)
    op.drop_index("ix_hub_samples_cluster_at", table_name="hub_samples")
    op.drop_table("hub_samples")
    op.drop_table("hub_snapshots")
    op.drop_table("hub_members")
