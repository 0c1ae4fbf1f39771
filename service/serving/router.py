"""HTTP route for serving estimates."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Body, Request

from schemas.jobs import JobKind
from schemas.serving import ServingRead, ServingRequest
from service.auth import ViewerDep
from service.deps import SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import SERVING_EXAMPLES
from service.jobs.http import ACCEPTED, IdempotencyKey, PreferHeader, accepted, wants_async
from service.serving import service

router = APIRouter(prefix="/v1/estimate", tags=["serving"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


@router.post("/serving", response_model=ServingRead, responses=ACCEPTED)
def estimate_serving(
    request: Request,
    session: SessionDep,
    principal: ViewerDep,
    background: BackgroundTasks,
    body: Annotated[ServingRequest, Body(openapi_examples=SERVING_EXAMPLES)],
    prefer: PreferHeader = None,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """Simulate a serving deployment under load, iteration by iteration, as the engines batch in flight.

    Throughput, time to first token and per output token (mean, p50, p90, p99), queueing, batch and KV-cache use,
    preemptions, goodput, under a closed loop, an open loop or a trace (`load.trace_id`: one stored with
    POST /v1/traces). For one static batch use /v1/estimate/inference."""
    if wants_async(prefer):
        return accepted(request, session, background, JobKind.estimate_serving, body, principal, idempotency_key, True)
    return service.estimate(session, body)
