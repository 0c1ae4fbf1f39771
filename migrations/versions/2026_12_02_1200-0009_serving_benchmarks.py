"""Measured load tests: each upload's deployment, load, measured figures and the prediction made at upload; and the
serving calibrations fitted on them.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 11:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONDocument = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "serving_benchmarks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("format", sa.String(length=20), nullable=False),
        sa.Column("model", sa.String(length=64), nullable=False),
        sa.Column("hardware", sa.String(length=64), nullable=False),
        sa.Column("hardware_version", sa.Integer(), nullable=False),
        sa.Column("device", sa.String(length=200), nullable=True),
        sa.Column("engine", sa.String(length=20), nullable=False),
        sa.Column("engine_version", sa.String(length=64), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=True),
        sa.Column("deployment", JSONDocument, nullable=False),
        sa.Column("load", JSONDocument, nullable=False),
        sa.Column("measured", JSONDocument, nullable=False),
        sa.Column("predicted", JSONDocument, nullable=False),
        sa.Column("error_ttft", sa.Float(), nullable=True),
        sa.Column("error_tpot", sa.Float(), nullable=True),
        sa.Column("error_e2e", sa.Float(), nullable=True),
        sa.Column("error_output_tokens_per_s", sa.Float(), nullable=True),
        sa.Column("api_key_id", sa.Integer(), nullable=True),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["api_key_id"], ["api_keys.id"], name=op.f("fk_serving_benchmarks_api_key_id_api_keys"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_serving_benchmarks")),
        sa.UniqueConstraint("api_key_id", "idempotency_key", name=op.f("uq_serving_benchmarks_api_key_id")),
    )
    for column in ("created_at", "hardware", "model"):
        op.create_index(op.f(f"ix_serving_benchmarks_{column}"), "serving_benchmarks", [column], unique=False)
    op.create_table(
        "serving_calibrations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hardware", sa.String(length=64), nullable=False),
        sa.Column("engine", sa.String(length=20), nullable=True),
        sa.Column("model", sa.String(length=64), nullable=True),
        sa.Column("points", sa.Integer(), nullable=False),
        sa.Column("parameters", JSONDocument, nullable=False),
        sa.Column("errors", JSONDocument, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_serving_calibrations")),
    )
    op.create_index(op.f("ix_serving_calibrations_hardware"), "serving_calibrations", ["hardware"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_serving_calibrations_hardware"), table_name="serving_calibrations")
    op.drop_table("serving_calibrations")
    for column in ("created_at", "hardware", "model"):
        op.drop_index(op.f(f"ix_serving_benchmarks_{column}"), table_name="serving_benchmarks")
    op.drop_table("serving_benchmarks")
