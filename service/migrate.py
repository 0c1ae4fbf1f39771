"""Run Alembic from code, with the options of alembic.ini, so an installed package needs no ini file."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text

from service.db import make_engine
from service.settings import normalise_database_url

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(database_url: str, connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option(
        "file_template", "%%(year)d_%%(month).2d_%%(day).2d_%%(hour).2d%%(minute).2d-%%(rev)s_%%(slug)s"
    )
    # ConfigParser interpolation: a literal % in a password must be doubled.
    cfg.set_main_option("sqlalchemy.url", normalise_database_url(database_url).replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    """Upgrade the schema. On PostgreSQL under an advisory lock: replicas that start together would otherwise both
    find an empty database and race to create the same tables, and all but one fail. The lock is per schema
    (`current_schema()`), so test schemas of one database do not wait for each other."""
    url = normalise_database_url(database_url)
    if not url.startswith("postgresql"):
        command.upgrade(alembic_config(database_url), revision)
        return
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(_LOCK)
            conn.commit()  # a session-level lock: it outlives this transaction, Alembic runs its own
            try:
                command.upgrade(alembic_config(database_url, conn), revision)
            finally:
                conn.rollback()
                conn.execute(_UNLOCK)
                conn.commit()
    finally:
        engine.dispose()


_LOCK_KEY = "hashtext('ridgeline-migrate:' || current_schema())"
_LOCK = text(f"SELECT pg_advisory_lock({_LOCK_KEY})")
_UNLOCK = text(f"SELECT pg_advisory_unlock({_LOCK_KEY})")


def downgrade(database_url: str, revision: str) -> None:
    command.downgrade(alembic_config(database_url), revision)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(database_url: str) -> str | None:
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
