"""Heavy rate windows: per client (an API key or an address) and window, the heavy requests (serving estimates,
plans) counted by every replica (service.heavy).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 11:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "heavy_rate_windows",
        sa.Column("client", sa.String(length=80), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("client", "window_start", name=op.f("pk_heavy_rate_windows")),
    )


def downgrade() -> None:
    op.drop_table("heavy_rate_windows")
