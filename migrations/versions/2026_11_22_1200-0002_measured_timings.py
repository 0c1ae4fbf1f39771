"""Measured timings: API keys, benchmark runs and results, calibrations.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 12:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONDocument = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("scope", sa.String(length=10), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("key_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_sha256", name=op.f("uq_api_keys_key_sha256")),
    )
    op.create_index(op.f("ix_api_keys_prefix"), "api_keys", ["prefix"])

    op.create_table(
        "benchmark_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hardware", sa.String(length=64), nullable=False),
        sa.Column("device", sa.String(length=200), nullable=True),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("software", JSONDocument, nullable=False),
        sa.Column("timing_scope", sa.String(length=20), nullable=False),
        sa.Column("api_key_id", sa.Integer(), nullable=True),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("result_count", sa.Integer(), nullable=False),
        sa.Column("predicted_count", sa.Integer(), nullable=False),
        sa.Column("calibrated_count", sa.Integer(), nullable=False),
        sa.Column("calibration_id", sa.Integer(), nullable=True),
        sa.Column("median_measured_over_predicted", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["api_key_id"], ["api_keys.id"], name=op.f("fk_benchmark_runs_api_key_id_api_keys")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_benchmark_runs")),
        sa.UniqueConstraint("api_key_id", "idempotency_key", name=op.f("uq_benchmark_runs_api_key_id")),
    )
    op.create_index(op.f("ix_benchmark_runs_created_at"), "benchmark_runs", ["created_at"])
    op.create_index(op.f("ix_benchmark_runs_hardware"), "benchmark_runs", ["hardware"])

    op.create_table(
        "benchmark_results",
        sa.Column("id", BigId, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("op_kind", sa.String(length=20), nullable=False),
        sa.Column("dtype", sa.String(length=8), nullable=False),
        sa.Column("op", JSONDocument, nullable=False),
        sa.Column("median_s", sa.Float(), nullable=False),
        sa.Column("p10_s", sa.Float(), nullable=True),
        sa.Column("p90_s", sa.Float(), nullable=True),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("predicted_s", sa.Float(), nullable=True),
        sa.Column("predicted_overhead_s", sa.Float(), nullable=True),
        sa.Column("measured_over_predicted", sa.Float(), nullable=True),
        sa.Column("flops", sa.Float(), nullable=True),
        sa.Column("bytes", sa.Float(), nullable=True),
        sa.Column("calibrated_s", sa.Float(), nullable=True),
        sa.Column("calibration_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["benchmark_runs.id"],
            name=op.f("fk_benchmark_results_run_id_benchmark_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_benchmark_results")),
    )
    op.create_index("ix_benchmark_results_kind_dtype", "benchmark_results", ["op_kind", "dtype"])
    op.create_index(op.f("ix_benchmark_results_run_id"), "benchmark_results", ["run_id"])

    op.create_table(
        "calibrations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hardware", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("op_families", JSONDocument, nullable=False),
        sa.Column("request", JSONDocument, nullable=False),
        sa.Column("summary", JSONDocument, nullable=False),
        sa.Column("model", JSONDocument, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calibrations")),
        sa.UniqueConstraint("hardware", "version", name=op.f("uq_calibrations_hardware")),
    )
    op.create_index(op.f("ix_calibrations_hardware"), "calibrations", ["hardware"])


def downgrade() -> None:
    op.drop_index(op.f("ix_calibrations_hardware"), table_name="calibrations")
    op.drop_table("calibrations")
    op.drop_index(op.f("ix_benchmark_results_run_id"), table_name="benchmark_results")
    op.drop_index("ix_benchmark_results_kind_dtype", table_name="benchmark_results")
    op.drop_table("benchmark_results")
    op.drop_index(op.f("ix_benchmark_runs_hardware"), table_name="benchmark_runs")
    op.drop_index(op.f("ix_benchmark_runs_created_at"), table_name="benchmark_runs")
    op.drop_table("benchmark_runs")
    op.drop_index(op.f("ix_api_keys_prefix"), table_name="api_keys")
    op.drop_table("api_keys")
