"""HTTP route for serving estimates."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Body, Request, Response

from schemas.jobs import JobKind
from schemas.serving import ServingRead, ServingRequest
from service.auth import ViewerDep
from service.encoding import MEDIA_TYPE, OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import SERVING_EXAMPLES
from service.heavy import HEAVY_RESPONSES, HeavyDep
from service.jobs.http import ACCEPTED, IdempotencyKey, PreferHeader, accept, wants_async
from service.serving import service

router = APIRouter(prefix="/v1/estimate", tags=["serving"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


# A heavy endpoint (service.heavy): the answer is encoded on the compute's thread (response_model documents it). With
# `Prefer: respond-async` it is a job (service.jobs): 202 at once, without a heavy slot.
@router.post("/serving", response_model=ServingRead, responses={**HEAVY_RESPONSES, **ACCEPTED})
async def estimate_serving(
    request: Request,
    heavy: HeavyDep,
    principal: ViewerDep,
    background: BackgroundTasks,
    body: Annotated[ServingRequest, Body(openapi_examples=SERVING_EXAMPLES)],
    prefer: PreferHeader = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Simulate a serving deployment under load, iteration by iteration, as the engines batch in flight.

    Throughput, time to first token and per output token (mean, p50, p90, p99), queueing, batch and KV-cache use,
    preemptions, goodput, under a closed loop, an open loop or a trace (`load.trace_id`: one stored with
    POST /v1/traces). For one static batch use /v1/estimate/inference."""
    if wants_async(prefer):
        return await accept(request, background, JobKind.estimate_serving, body, principal, idempotency_key, True)
    content = await heavy.run(lambda session: service.read(session, body), lambda i, s: service.estimate(i, body, s))
    return Response(content, media_type=MEDIA_TYPE)
