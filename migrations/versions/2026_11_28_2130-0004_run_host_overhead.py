"""A run's per-call host cost: wall-clock uploads may say what one call costs on their host, and their predictions
add it (schemas.benchmarks.BenchmarkRunCreate.host_overhead_s).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-28 21:30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("benchmark_runs") as batch:
        batch.add_column(sa.Column("host_overhead_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("benchmark_runs") as batch:
        batch.drop_column("host_overhead_s")
