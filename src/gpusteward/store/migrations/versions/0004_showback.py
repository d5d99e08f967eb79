"""Showback (issue 19): ``ledger_showback`` per day, team, owner, GPU model and rate, and
``ledger_closed_months``, the months frozen for finance.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

A database adopted from the old ``create_all`` already has the tables (adoption creates every
missing table before stamping 0001), so each is created only where it is missing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

_AMOUNTS = (
    "held_gpu_hours",
    "used_gpu_hours",
    "wasted_gpu_hours",
    "reclaimed_gpu_hours",
    "spend",
    "kwh",
    "power_cost",
)


def upgrade() -> None:
    tables = set(sa.inspect(op.get_bind()).get_table_names())
    if "ledger_showback" not in tables:
        op.create_table(
            "ledger_showback",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("day", sa.String(length=10), nullable=False),
            sa.Column("team", sa.String(length=255), nullable=False),
            sa.Column("user_name", sa.String(length=255), nullable=False),
            sa.Column("gpu_model", sa.String(length=255), nullable=False),
            sa.Column("rate", sa.String(length=16), nullable=False),
            sa.Column("currency", sa.String(length=8), nullable=False),
            *(sa.Column(name, sa.Float(), nullable=False) for name in _AMOUNTS),
            sa.PrimaryKeyConstraint("id"),
            sa.UniqueConstraint(
                "day", "team", "user_name", "gpu_model", "rate", "currency", name="uq_ledger_showback"
            ),
        )
        op.create_index(op.f("ix_ledger_showback_day"), "ledger_showback", ["day"], unique=False)
    if "ledger_closed_months" not in tables:
        op.create_table(
            "ledger_closed_months",
            sa.Column("month", sa.String(length=7), nullable=False),
            sa.Column("closed_at", sa.DateTime(), nullable=False),
            sa.PrimaryKeyConstraint("month"),
        )


def downgrade() -> None:
    op.drop_table("ledger_closed_months")
    op.drop_index(op.f("ix_ledger_showback_day"), table_name="ledger_showback")
    op.drop_table("ledger_showback")
