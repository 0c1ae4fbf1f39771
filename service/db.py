"""Engine, sessions and the unit of work: one transaction per request, committed by the dependency."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from service.settings import normalise_database_url


def make_engine(url: str, *, pool_size: int = 5, **kwargs: Any) -> Engine:
    url = normalise_database_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            # WAL lets readers proceed while a writer commits: several uvicorn workers share one file.
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    # pool_pre_ping: a PostgreSQL restart must not leave dead connections in the pool.
    return create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=pool_size * 2, **kwargs)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=False)


def unit_of_work(factory: sessionmaker[Session]) -> Iterator[Session]:
    """Yield a session; commit when the request succeeded, roll back when it raised."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
