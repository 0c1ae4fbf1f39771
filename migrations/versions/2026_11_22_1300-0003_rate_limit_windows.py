"""Rate limit windows: per API key and window, the upload requests and results counted (service.ratelimit).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 13:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rate_limit_windows",
        sa.Column("api_key_id", sa.Integer(), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("results", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["api_key_id"], ["api_keys.id"], name=op.f("fk_rate_limit_windows_api_key_id_api_keys"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("api_key_id", "window_start", name=op.f("pk_rate_limit_windows")),
    )


def downgrade() -> None:
    op.drop_table("rate_limit_windows")
