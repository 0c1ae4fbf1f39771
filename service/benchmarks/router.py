"""HTTP routes for measured timings."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response

from schemas.benchmarks import (
    BenchmarkRunCreate,
    BenchmarkRunCreated,
    BenchmarkRunDetail,
    BenchmarkRunRead,
    TimingScope,
)
from schemas.common import Dtype, Page
from schemas.limits import MAX_STORED_VERSION
from service.auth import AUTH_RESPONSES, UploaderDep, ViewerDep, WriteSessionDep
from service.benchmarks import service
from service.deps import IdempotencyKey, PagingDep, SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import BENCHMARK_RUN_EXAMPLES
from service.ratelimit import RateLimits
from service.results.repository import RunFilters

router = APIRouter(
    prefix="/v1/benchmarks",
    tags=["benchmarks"],
    responses={**ERROR_RESPONSES, **AUTH_RESPONSES},
    route_class=OrjsonRoute,
)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _gc_paused() -> Iterator[None]:
    # Entered before FastAPI validates the body (sub-dependencies are solved first): the pause covers validating
    # 10 000 results as well as storing them (service.cyclic_gc_paused says why).
    with service.cyclic_gc_paused():
        yield


def _rate_limits(request: Request) -> RateLimits:
    limits: RateLimits = request.app.state.rate_limits
    return limits


RATE_LIMITED: dict[int | str, dict[str, Any]] = {
    429: ERROR_RESPONSES[400]
    | {
        "description": "This key's upload rate limit (uploads or results per window, shared by every replica) is "
        "reached; `Retry-After` says when the same upload will be accepted. Nothing was stored or counted.",
        "headers": {"Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer"}}},
    }
}


@router.post(
    "",
    status_code=201,
    dependencies=[Depends(_gc_paused, scope="function")],
    responses={409: ERROR_RESPONSES[400] | {"description": "Idempotency-Key reused with another body"}, **RATE_LIMITED},
)
def upload_run(
    session: WriteSessionDep,
    principal: UploaderDep,
    limits: Annotated[RateLimits, Depends(_rate_limits)],
    response: Response,
    body: Annotated[BenchmarkRunCreate, Body(openapi_examples=BENCHMARK_RUN_EXAMPLES)],
    idempotency_key: IdempotencyKey = None,
) -> BenchmarkRunCreated:
    """Upload a run of measured timings (needs an upload key); each result is stored with its prediction."""
    result, replayed = service.create_run(session, body, principal, idempotency_key, limits)
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return result


@router.get("")
def list_runs(
    session: SessionDep,
    viewer: ViewerDep,
    paging: PagingDep,
    hardware: Annotated[str | None, Query(max_length=64, description="Only runs on this profile (slug).")] = None,
    hardware_version: Annotated[
        int | None,
        Query(ge=1, le=MAX_STORED_VERSION, description="Only runs predicted with this version of the profile."),
    ] = None,
    op_kind: Annotated[str | None, Query(max_length=20, description="Only runs with results of this op kind.")] = None,
    dtype: Annotated[Dtype | None, Query(description="Only runs with results in this dtype.")] = None,
    software: Annotated[
        str | None,
        Query(
            max_length=150,
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*(=.+)?$",
            description="`name` (runs that list it) or `name=version`, e.g. `jax=0.4.35`.",
        ),
    ] = None,
    timing_scope: Annotated[TimingScope | None, Query()] = None,
    since: Annotated[datetime | None, Query(description="Uploaded at or after (ISO 8601; UTC if no offset).")] = None,
    until: Annotated[datetime | None, Query(description="Uploaded before (ISO 8601; UTC if no offset).")] = None,
) -> Page[BenchmarkRunRead]:
    """List uploaded runs, newest first."""
    name, _, version = (software or "").partition("=")
    filters = RunFilters(
        hardware=hardware,
        hardware_version=hardware_version,
        op_kind=op_kind,
        dtype=dtype.value if dtype else None,
        software=name or None,
        software_version=version or None,
        timing_scope=timing_scope.value if timing_scope else None,
        since=_utc(since),
        until=_utc(until),
    )
    items, total = service.page_runs(session, filters, paging.limit, paging.offset, viewer)
    return Page(items=items, total=total, limit=paging.limit, offset=paging.offset)


@router.get("/{run_id}")
def get_run(
    session: SessionDep,
    viewer: ViewerDep,
    paging: PagingDep,
    run_id: Annotated[int, Path(ge=1, le=2**31 - 1)],
    op_kind: Annotated[str | None, Query(max_length=20)] = None,
    dtype: Annotated[Dtype | None, Query()] = None,
) -> BenchmarkRunDetail:
    """One run with a page of its results, each with its prediction and measured / predicted."""
    return service.get_run(
        session, run_id, op_kind, dtype.value if dtype else None, paging.limit, paging.offset, viewer
    )
