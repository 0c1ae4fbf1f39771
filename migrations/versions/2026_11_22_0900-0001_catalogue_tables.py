"""Catalogue tables: hardware profiles and model configs.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 09:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONDocument = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def _catalogue_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("builtin", sa.Boolean(), nullable=False),
        sa.Column("spec", JSONDocument, nullable=False),
        sa.Column("spec_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "hardware_profiles",
        sa.Column("vendor", sa.String(length=20), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        *_catalogue_columns(),
        sa.PrimaryKeyConstraint("slug", name=op.f("pk_hardware_profiles")),
    )
    op.create_index(op.f("ix_hardware_profiles_kind"), "hardware_profiles", ["kind"])
    op.create_index(op.f("ix_hardware_profiles_vendor"), "hardware_profiles", ["vendor"])

    op.create_table(
        "model_configs",
        sa.Column("family", sa.String(length=200), nullable=False),
        *_catalogue_columns(),
        sa.PrimaryKeyConstraint("slug", name=op.f("pk_model_configs")),
    )
    op.create_index(op.f("ix_model_configs_family"), "model_configs", ["family"])


def downgrade() -> None:
    op.drop_index(op.f("ix_model_configs_family"), table_name="model_configs")
    op.drop_table("model_configs")
    op.drop_index(op.f("ix_hardware_profiles_vendor"), table_name="hardware_profiles")
    op.drop_index(op.f("ix_hardware_profiles_kind"), table_name="hardware_profiles")
    op.drop_table("hardware_profiles")
