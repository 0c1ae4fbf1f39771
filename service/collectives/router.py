"""HTTP route for collective estimates."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response

from schemas.collectives import CollectiveRead, CollectiveRequest
from service.catalogue.loopread import LoopReads
from service.collectives import service
from service.encoding import MEDIA_TYPE, OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import COLLECTIVE_EXAMPLES

router = APIRouter(prefix="/v1/estimate", tags=["collectives"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


# On the op endpoint's hot path (`service.estimate_collective` says how); the body is the document the service built and
# encoded (response_model documents it).
@router.post("/collective", response_model=CollectiveRead)
async def estimate_collective(
    request: Request, body: Annotated[CollectiveRequest, Body(openapi_examples=COLLECTIVE_EXAMPLES)]
) -> Response:
    """Estimate a collective (all-reduce, all-gather, …) on a device's own fabric or an explicit topology."""
    return Response(await service.estimate_collective(LoopReads.of(request), body), media_type=MEDIA_TYPE)
