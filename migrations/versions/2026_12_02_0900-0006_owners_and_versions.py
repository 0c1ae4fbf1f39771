"""Who made each user entry, and every version of an entry's document: catalogue entries and traces record the key
that made them (only it or an admin key may change them), a change to a profile or model is a new version kept in
its versions table, and runs and calibrations record the profile version they were predicted with and fitted on.

What is stored already becomes version 1 (its current document), owned by no key (an admin's to change).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 09:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONDocument = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

CATALOGUE = {"hardware_profiles": "hardware_profile_versions", "model_configs": "model_config_versions"}
OWNED = ("hardware_profiles", "model_configs", "serving_traces")
VERSIONED_USES = ("benchmark_runs", "calibrations")


def upgrade() -> None:
    # On SQLite the owned tables are copied (batch mode: SQLite adds a constraint only to a table made anew), which is
    # safe because nothing refers to them yet; a referenced table (api_keys, benchmark_runs) is never copied: with
    # foreign keys on, dropping it would delete or orphan what refers to it. Their columns are added in place.
    for table in OWNED:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("owner_key_id", sa.Integer(), nullable=True))
            if table in CATALOGUE:
                batch.add_column(sa.Column("version", sa.Integer(), server_default="1", nullable=False))
            batch.create_foreign_key(
                batch.f(f"fk_{table}_owner_key_id_api_keys"), "api_keys", ["owner_key_id"], ["id"], ondelete="SET NULL"
            )
    for table in VERSIONED_USES:
        op.add_column(table, sa.Column("hardware_version", sa.Integer(), server_default="1", nullable=False))
    for parent, versions in CATALOGUE.items():
        op.create_table(
            versions,
            sa.Column("version", sa.Integer(), nullable=False),
            sa.Column("spec", JSONDocument, nullable=False),
            sa.Column("spec_sha256", sa.String(length=64), nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("slug", sa.String(length=64), nullable=False),
            sa.ForeignKeyConstraint(
                ["slug"], [f"{parent}.slug"], name=op.f(f"fk_{versions}_slug_{parent}"), ondelete="CASCADE"
            ),
            sa.PrimaryKeyConstraint("slug", "version", name=op.f(f"pk_{versions}")),
        )
        op.execute(
            f"INSERT INTO {versions} (slug, version, spec, spec_sha256, created_at) "
            f"SELECT slug, 1, spec, spec_sha256, updated_at FROM {parent}"
        )


def downgrade() -> None:
    for versions in CATALOGUE.values():
        op.drop_table(versions)
    for table in VERSIONED_USES:
        # In place on SQLite too (3.35+ drops a plain column): copying benchmark_runs would cascade-delete its results.
        op.execute(f"ALTER TABLE {table} DROP COLUMN hardware_version")
    for table in OWNED:
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(batch.f(f"fk_{table}_owner_key_id_api_keys"), type_="foreignkey")
            batch.drop_column("owner_key_id")
            if table in CATALOGUE:
                batch.drop_column("version")
