"""HTTP routes for measured load tests."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response

from schemas.common import Page
from schemas.serving_benchmarks import EngineName, ServingBenchmarkCreate, ServingBenchmarkRead
from service.auth import AUTH_RESPONSES, UploaderDep, ViewerDep, WriteSessionDep
from service.deps import IdempotencyKey, PagingDep, SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.ratelimit import RateLimits
from service.results.serving import Filters
from service.serving_benchmarks import service

router = APIRouter(
    prefix="/v1/serving-benchmarks",
    tags=["benchmarks"],
    responses={**ERROR_RESPONSES, **AUTH_RESPONSES},
    route_class=OrjsonRoute,
)


def _rate_limits(request: Request) -> RateLimits:
    limits: RateLimits = request.app.state.rate_limits
    return limits


RESPONSES: dict[int | str, dict[str, Any]] = {
    409: ERROR_RESPONSES[400] | {"description": "Idempotency-Key reused with another body"},
    429: ERROR_RESPONSES[400]
    | {
        "description": "This key's upload rate limit is reached; `Retry-After` says when. Nothing was stored.",
        "headers": {"Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer"}}},
    },
}


@router.post("", status_code=201, responses=RESPONSES)
def upload(
    session: WriteSessionDep,
    principal: UploaderDep,
    limits: Annotated[RateLimits, Depends(_rate_limits)],
    response: Response,
    body: Annotated[ServingBenchmarkCreate, Body()],
    idempotency_key: IdempotencyKey = None,
) -> ServingBenchmarkRead:
    """Upload a load test (a tool's result file and the deployment it measured); stored with its prediction."""
    result, replayed = service.create(session, body, principal, idempotency_key, limits)
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return result


@router.get("")
def list_serving_benchmarks(
    session: SessionDep,
    viewer: ViewerDep,
    paging: PagingDep,
    hardware: Annotated[str | None, Query(max_length=64, description="Only load tests on this profile.")] = None,
    model: Annotated[str | None, Query(max_length=64, description="Only load tests of this model.")] = None,
    engine: Annotated[EngineName | None, Query(description="Only load tests of this engine.")] = None,
) -> Page[ServingBenchmarkRead]:
    """List uploaded load tests, newest first, each with measured, predicted and predicted / measured − 1."""
    filters = Filters(hardware=hardware, model=model, engine=str(engine) if engine else None)
    items, total = service.page(session, filters, paging.limit, paging.offset, viewer)
    return Page(items=items, total=total, limit=paging.limit, offset=paging.offset)


@router.get("/{bench_id}")
def get_serving_benchmark(
    session: SessionDep, viewer: ViewerDep, bench_id: Annotated[int, Path(ge=1, le=2**31 - 1)]
) -> ServingBenchmarkRead:
    """One uploaded load test."""
    return service.get(session, bench_id, viewer)
