"""HTTP route for serving estimates."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from schemas.serving import ServingRead, ServingRequest
from service.deps import SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import SERVING_EXAMPLES
from service.serving import service

router = APIRouter(prefix="/v1/estimate", tags=["serving"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


@router.post("/serving")
def estimate_serving(
    session: SessionDep, body: Annotated[ServingRequest, Body(openapi_examples=SERVING_EXAMPLES)]
) -> ServingRead:
    """Simulate a serving deployment under load, iteration by iteration, as the engines batch in flight.

    Throughput, time to first token and per output token (mean, p50, p90, p99), queueing, batch and KV-cache use,
    preemptions, goodput, under a closed loop, an open loop or a trace (`load.trace_id`: one stored with
    POST /v1/traces). For one static batch use /v1/estimate/inference."""
    return service.estimate(session, body)
