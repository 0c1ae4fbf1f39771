"""Migrations build the schema from nothing, match the ORM models exactly, and round-trip."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from service import migrate
from service.db import make_engine
from service.orm import Base

TABLES = {
    "hardware_profiles", "model_configs", "alembic_version",
    "api_keys", "benchmark_runs", "benchmark_results", "calibrations", "rate_limit_windows", "serving_traces",
}  # fmt: skip


def _drift(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return list(compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata))
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


@pytest.mark.parametrize("empty_database_url", ["sqlite", "postgresql"], indirect=True)
def test_upgrade_has_no_drift_and_round_trips(empty_database_url: str) -> None:
    url = empty_database_url
    assert _tables(url) == set()

    migrate.upgrade(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    assert _tables(url) == TABLES
    assert _drift(url) == []

    migrate.downgrade(url, "base")
    assert _tables(url) == {"alembic_version"}
    assert migrate.current_revision(url) is None

    migrate.upgrade(url)
    assert _tables(url) == TABLES
    assert _drift(url) == []


def test_revisions_are_a_single_line_of_date_prefixed_files() -> None:
    files = sorted(p.name for p in migrate.MIGRATIONS_DIR.joinpath("versions").glob("*.py") if p.name != "__init__.py")
    assert files, "no migrations"
    assert all(name[:4].isdigit() and name[4] == "_" for name in files)
    assert migrate.head_revision() is not None  # one head: get_current_head raises on several
