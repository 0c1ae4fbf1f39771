"""Catalogue digests read on the event loop, for the hot estimate endpoints (bench/throughput.py).

An estimate on a catalogue profile must read the profile's `spec_sha256` on every request (a parse is cached by it:
`service.catalogue.service.get_spec`). Through a SQLAlchemy session in Starlette's thread pool that read costs more
than everything else the op endpoint does: the trip to a worker thread and back, under load, is most of it
(docs/operations.md, "Throughput"). A reader here does the one indexed read without leaving the event loop, with the
driver alone:

- SQLite (the embedded default): the file is local, the read is one B-tree lookup made in place, and in WAL
  mode a reader never waits for a writer. The connection gives up after `SQLITE_BUSY_MS` instead of the engine's
  30 s, so the loop is never held for long.
- PostgreSQL: psycopg's async connections (a small pool of its own, `psycopg_pool`), awaited, so the loop serves other
  requests during the round trip.

Whenever a reader cannot answer (a locked or missing file, an unmigrated schema, PostgreSQL down or every connection
busy), the caller falls back to the ordinary session in the thread pool, which waits, retries and reports outages
(503) as it always has. A broken pooled connection is discarded by the pool when it is returned.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import psycopg
from fastapi import Request
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from service.db import CONNECT_TIMEOUT_S
from service.deps import in_unit_of_work

log = logging.getLogger("ridgeline")

TABLES = ("hardware_profiles", "model_configs")
_DIGEST_SQL = {table: f"SELECT spec_sha256 FROM {table} WHERE slug = %s" for table in TABLES}  # psycopg's placeholder
_SQLITE_DIGEST_SQL = {table: f"SELECT spec_sha256 FROM {table} WHERE slug = ?" for table in TABLES}

# Milliseconds the loop may wait on a locked SQLite database before falling back to the thread pool. WAL readers are
# blocked only while a connection recovers the WAL after a crash or holds the file in exclusive locking mode (which
# Ridgeline never does), so this is a guard, not a cost paid.
SQLITE_BUSY_MS = 50
# Seconds a request waits for one of the pool's connections before taking the thread-pool path instead: a read is one
# indexed lookup, so a pool this busy, or not connected (PostgreSQL down), is better left to the session's own handling.
POSTGRES_WAIT_S = 0.2
# Connections per process. Each serves many digest reads a second; the compose file's max_connections covers
# every process's engine pool and this one (tests/service/test_scale_out.py checks the sum).
POSTGRES_POOL_MAX = 4


class DigestReader:
    """No reader: every estimate takes the session path (an in-memory SQLite database is one per connection)."""

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def digest(self, table: str, slug: str) -> tuple[bool, str | None]:
        """`(True, digest)` (digest None: no such entry), or `(False, None)` when this reader cannot say: read it
        through a session instead."""
        return False, None


class SqliteDigests(DigestReader):
    def __init__(self, path: Path) -> None:
        self._path = path
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # connect and close once, whichever thread asks

    def _connect(self) -> sqlite3.Connection:
        with self._lock:
            if self._connection is None:
                if not self._path.is_file():  # sqlite3 would create an empty database
                    raise sqlite3.OperationalError(f"no database file at {self._path}")
                # Autocommit (isolation_level None): each SELECT is its own read transaction, so it sees every commit
                # made before it, by this process or another.
                connection = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
                connection.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
                connection.execute("PRAGMA query_only=ON")
                self._connection = connection
            return self._connection

    async def digest(self, table: str, slug: str) -> tuple[bool, str | None]:
        try:
            row = (self._connection or self._connect()).execute(_SQLITE_DIGEST_SQL[table], (slug,)).fetchone()
        except sqlite3.Error:
            await self.close()  # reopened on the next read
            return False, None
        return True, None if row is None else str(row[0])

    async def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


class PostgresDigests(DigestReader):
    def __init__(self, connect_kwargs: dict[str, Any]) -> None:
        self._kwargs = {**connect_kwargs, "autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S}
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]] | None = None

    async def open(self) -> None:
        """Start the pool on the running loop (the app's startup); it connects in the background, so a database
        that is down at start-up delays nothing: reads fall back until it is up."""
        pool: AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]] = AsyncConnectionPool(
            kwargs=self._kwargs, min_size=1, max_size=POSTGRES_POOL_MAX, open=False, name="ridgeline-digests"
        )
        await pool.open(wait=False)
        self._pool = pool

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def digest(self, table: str, slug: str) -> tuple[bool, str | None]:
        if self._pool is None:  # no startup ran (an app driven without its lifespan)
            return False, None
        try:
            async with self._pool.connection(timeout=POSTGRES_WAIT_S) as connection:
                cursor = await connection.execute(_DIGEST_SQL[table], (slug,))
                row = await cursor.fetchone()
        except (psycopg.Error, PoolTimeout, OSError) as err:
            log.debug("digest read on the loop failed (%s); using a session", err)
            return False, None
        return True, None if row is None else str(row[0])


def digest_reader(engine: Engine) -> DigestReader:
    """The reader for the engine's database."""
    url = engine.url
    if url.get_backend_name() == "sqlite":
        if url.database in (None, "", ":memory:") or url.query.get("mode"):
            return DigestReader()
        return SqliteDigests(Path(url.database or ""))
    if url.get_backend_name() == "postgresql":
        _, kwargs = engine.dialect.create_connect_args(url)
        kwargs.pop("context", None)  # SQLAlchemy's type adapters, not a connection parameter
        return PostgresDigests(dict(kwargs))
    return DigestReader()


T = TypeVar("T")


class LoopReads(NamedTuple):  # a tuple: made on every hot request, at the cost of a tuple
    """What a hot estimate endpoint reads with: the catalogue's digests on the event loop (its app's reader), else the
    request's unit of work, read only, in one trip through the thread pool (`service.deps.in_unit_of_work`)."""

    digests: DigestReader
    request: Request

    @classmethod
    def of(cls, request: Request) -> LoopReads:
        return cls(request.app.state.digests, request)

    async def in_session(self, work: Callable[[Session], T]) -> T:
        """`work(session)` in the request's unit of work: closed, never committed (the estimates only read)."""
        return await in_unit_of_work(self.request, work, read_only=True)
