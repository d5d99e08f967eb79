"""Queue time in the reports (issue 16): ``queue_waits``, one row per started job.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

A database adopted from the old ``create_all`` already has the table (adoption creates every
missing table before stamping 0001), so it is created only where it is missing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    if "queue_waits" in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        "queue_waits",
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=255), nullable=False),
        sa.Column("queue", sa.String(length=255), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("waited_s", sa.Float(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("source", "job_id"),
    )
    op.create_index(op.f("ix_queue_waits_started_at"), "queue_waits", ["started_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_queue_waits_started_at"), table_name="queue_waits")
    op.drop_table("queue_waits")
