"""Typed dependencies shared by the routers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, TypeVar

from fastapi import Depends, Header, Query, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from service.db import unit_of_work
from service.settings import Settings
from service.timeouts import current_deadline


def _session(request: Request) -> Iterator[Session]:
    yield from unit_of_work(request.app.state.sessionmaker, current_deadline(request.scope))


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


# One unit of work per request, committed *before* the response is sent: FastAPI ends a `yield` dependency after
# the response unless it has scope="function", so a client could read a 201 whose commit then failed (or was killed).
SessionDep = Annotated[Session, Depends(_session, scope="function")]
SettingsDep = Annotated[Settings, Depends(_settings)]

T = TypeVar("T")


async def in_unit_of_work(request: Request, work: Callable[[Session], T], *, read_only: bool = False) -> T:
    """`work(session)` in the request's unit of work (`SessionDep`'s: committed before the answer, with the request's
    deadline), in one trip through the thread pool. A sync endpoint with `SessionDep` crosses to a worker thread to open
    the session, again to run, and again to commit; each crossing costs ~0.1 ms of CPU alone and several times that
    under load (README, "Throughput"). For the hot read endpoints, declared `async`.

    `read_only`: for work that only reads (the estimates): the session is closed, its transaction rolled back, never
    committed, which saves the commit (~20 µs); with nothing to commit there is no commit for a deadline to refuse."""

    def run() -> T:
        if read_only:
            with request.app.state.sessionmaker() as session:
                return work(session)
        with contextmanager(unit_of_work)(request.app.state.sessionmaker, current_deadline(request.scope)) as session:
            return work(session)

    return await run_in_threadpool(run)


class Paging:
    def __init__(
        self,
        settings: SettingsDep,
        limit: Annotated[int, Query(ge=1, le=500, description="Items per page (at most 500).")] = 50,
        offset: Annotated[int, Query(ge=0, le=10_000_000, description="Items to skip.")] = 0,
    ) -> None:
        self.limit = min(limit, settings.max_page_size)
        self.offset = offset


PagingDep = Annotated[Paging, Depends()]


# The Idempotency-Key header of an upload (`POST /v1/benchmarks`, `/v1/serving-benchmarks`).
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=200,
        description="A retry with the same key and body stores nothing and gets the first response; the same key "
        "with another body is a 409.",
    ),
]
