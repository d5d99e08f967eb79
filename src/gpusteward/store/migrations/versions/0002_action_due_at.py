"""Two-phase graceful stops: ``actions.due_at``, when a stop's follow-up is due.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

A database adopted from the old ``create_all`` may already have the column (adoption adds every
missing nullable column before stamping 0001), so it is added only where it is missing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("actions")}
    if "due_at" not in have:
        with op.batch_alter_table("actions") as batch:
            batch.add_column(sa.Column("due_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("actions") as batch:
        batch.drop_column("due_at")
