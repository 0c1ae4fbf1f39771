"""Request traces stored for serving estimates (`POST /v1/traces`, `load.trace_id`): the columns compressed, and
what a read summarises; the id is the digest of the columns (adapters.Trace).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 01:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONDocument = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "serving_traces",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("format", sa.String(length=20), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("summary", JSONDocument, nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_serving_traces")),
    )
    with op.batch_alter_table("serving_traces") as batch:
        batch.create_index(batch.f("ix_serving_traces_created_at"), ["created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("serving_traces") as batch:
        batch.drop_index(batch.f("ix_serving_traces_created_at"))
    op.drop_table("serving_traces")
