"""Engine, sessions and the unit of work: one transaction per request, committed by the dependency."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from service.settings import normalise_database_url
from service.timeouts import Deadline

# Seconds. A connect to a live PostgreSQL on a LAN takes milliseconds; 5 s rides out a slow network, not an outage.
CONNECT_TIMEOUT_S = 5
# Seconds a request waits for a pooled connection before a 503 (SQLAlchemy's default is 30).
POOL_TIMEOUT_S = 10


def make_engine(url: str, *, pool_size: int = 10, **kwargs: Any) -> Engine:
    """An engine whose pool keeps `pool_size` connections and lends up to as many more under load.

    The pool must keep what a loaded process uses: a connection lent beyond `pool_size` ("overflow") is closed when it
    comes back, so a process serving more concurrent sessions than it keeps opens and closes a connection per
    request (on SQLite with the pragmas below; on PostgreSQL a server process fork). 8 concurrent inference requests
    against a pool of 5 spent ~2.5 % of the server's CPU reconnecting (bench/throughput.py, py-spy)."""
    url = normalise_database_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=pool_size,
            max_overflow=pool_size,
            pool_timeout=POOL_TIMEOUT_S,
            **kwargs,
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            # WAL lets readers proceed while a writer commits: several uvicorn workers share one file.
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    # pool_pre_ping: a PostgreSQL restart must not leave dead connections in the pool. connect_timeout: while the
    # database is unreachable a request fails fast (503) instead of hanging on a TCP connect (libpq waits forever).
    connect_args = {"connect_timeout": CONNECT_TIMEOUT_S, **kwargs.pop("connect_args", {})}
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_timeout=POOL_TIMEOUT_S,
        connect_args=connect_args,
        **kwargs,
    )


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=False)


def unit_of_work(factory: sessionmaker[Session], deadline: Deadline | None = None) -> Iterator[Session]:
    """Yield a session; commit when the request succeeded, roll back when it raised. With a request's deadline,
    commit only if the request has not been answered "timed out" (service.timeouts says why)."""
    session = factory()
    try:
        yield session
        if deadline is not None:
            deadline.begin_commit()
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
