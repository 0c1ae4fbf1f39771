"""Catalogue digests read on the event loop, for the hot estimate endpoints (bench/throughput.py).

An estimate on a catalogue profile must read the profile's `spec_sha256` on every request (a parse is cached by it:
`service.catalogue.service.get_spec`). Through a SQLAlchemy session in Starlette's thread pool that read costs more
than everything else the op endpoint does: the trip to a worker thread and back, under load, is most of it (README,
"Throughput"). This reader does the one indexed read where the request already is, with the driver alone.

SQLite (the embedded default) only: the file is local, the read is one B-tree lookup (~10 µs), and in WAL mode a
reader never waits for a writer. The connection gives up after `BUSY_TIMEOUT_MS` instead of the engine's 30 s, so the
loop is never held: on any error the caller falls back to the ordinary session in the thread pool, which waits,
retries and reports outages as it always has. PostgreSQL reads cross a network and need an async driver; there the
reader is off and estimates take the thread-pool path.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from sqlalchemy import Engine

# Milliseconds the loop may wait on a locked database before falling back to the thread pool. WAL readers are
# blocked only while a connection recovers the WAL after a crash or takes an exclusive lock (which Ridgeline never
# does), so this is a guard, not a cost paid.
BUSY_TIMEOUT_MS = 50

_DIGEST_SQL = {
    table: f"SELECT spec_sha256 FROM {table} WHERE slug = ?" for table in ("hardware_profiles", "model_configs")
}


class LoopReader:
    """Reads catalogue digests without leaving the event loop; `None` from `available` means "use the session"."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # connect once even if two threads ask; reads happen on the loop's thread

    @classmethod
    def for_engine(cls, engine: Engine) -> LoopReader:
        """A reader for the engine's database: SQLite files only (an in-memory database is per connection)."""
        url = engine.url
        if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:") or url.query.get("mode"):
            return cls(None)
        return cls(Path(url.database or ""))

    @property
    def enabled(self) -> bool:
        return self._path is not None

    def _connect(self) -> sqlite3.Connection:
        with self._lock:
            if self._connection is None:
                if not (self._path and self._path.is_file()):  # sqlite3 would create an empty database
                    raise sqlite3.OperationalError(f"no database file at {self._path}")
                # uri=False: the path is a file name. Autocommit (isolation_level None): each SELECT is its own read
                # transaction, so it sees every commit made before it, by this process or another.
                connection = sqlite3.connect(self._path or "", check_same_thread=False, isolation_level=None)
                connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                connection.execute("PRAGMA query_only=ON")
                self._connection = connection
            return self._connection

    def digest(self, table: str, slug: str) -> tuple[bool, str | None]:
        """`(True, digest)` (digest None: no such entry), or `(False, None)` when this reader cannot say (no reader
        for this database, a locked or missing file, an unmigrated schema): read it through a session instead."""
        if self._path is None:
            return False, None
        try:
            row = self._connect().execute(_DIGEST_SQL[table], (slug,)).fetchone()
        except sqlite3.Error:
            self.close()  # a broken connection is reopened on the next read
            return False, None
        return True, None if row is None else str(row[0])

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
