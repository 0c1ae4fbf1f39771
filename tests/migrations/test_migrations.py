"""Migrations build the schema from nothing, match the ORM models exactly, and round-trip."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import column, insert, inspect, table, text

from service import migrate
from service.db import make_engine
from service.orm import Base, JSONDocument

TABLES = {
    "hardware_profiles", "model_configs", "alembic_version",
    "api_keys", "benchmark_runs", "benchmark_results", "calibrations", "rate_limit_windows", "serving_traces",
    "hardware_profile_versions", "model_config_versions", "heavy_rate_windows", "jobs", "serving_benchmarks",
    "serving_calibrations",
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


@pytest.mark.parametrize("empty_database_url", ["sqlite", "postgresql"], indirect=True)
def test_what_is_stored_becomes_version_1_owned_by_no_key(empty_database_url: str) -> None:
    """0006 on a database with a user profile and a run on it: the profile is at version 1, kept in its versions
    table with its document, owned by no key (an admin's to change), and the run names version 1."""
    url = empty_database_url
    migrate.upgrade(url, "0005")
    # The tables as 0005 left them (the ORM's have 0006's columns).
    now = datetime(2026, 12, 1, tzinfo=UTC)
    profile_columns = ("slug", "name", "builtin", "spec_sha256", "vendor", "kind", "created_at", "updated_at")
    run_columns = ("hardware", "host", "timing_scope", "request_sha256", "result_count", "predicted_count",
                   "calibrated_count", "created_at")  # fmt: skip
    profiles = table("hardware_profiles", *map(column, profile_columns), column("spec", JSONDocument))
    runs = table("benchmark_runs", *map(column, run_columns), column("software", JSONDocument))
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(insert(profiles).values(slug="mine", name="Mine", builtin=False, spec={"name": "Mine"},
                                                 spec_sha256="abc", vendor="nvidia", kind="gpu", created_at=now,
                                                 updated_at=now))  # fmt: skip
            conn.execute(insert(runs).values(hardware="mine", host="h", software={}, timing_scope="kernel",
                                             request_sha256="x", result_count=0, predicted_count=0,
                                             calibrated_count=0, created_at=now))  # fmt: skip
        migrate.upgrade(url)
        with engine.connect() as conn:
            assert tuple(conn.execute(text("SELECT version, owner_key_id FROM hardware_profiles")).one()) == (1, None)
            kept = conn.execute(text("SELECT slug, version, spec_sha256, spec FROM hardware_profile_versions")).all()
            assert [(r[0], r[1], r[2]) for r in kept] == [("mine", 1, "abc")]
            spec = kept[0][3]
            assert (json.loads(spec) if isinstance(spec, str) else spec) == {"name": "Mine"}  # SQLite's is text
            assert conn.execute(text("SELECT hardware_version FROM benchmark_runs")).scalar() == 1
    finally:
        engine.dispose()
