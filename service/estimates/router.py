"""HTTP routes for op estimates."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response

from schemas.estimates import EstimateOpRequest, EstimateOpsRead, EstimateOpsRequest, EstimateRead
from service.catalogue.loopread import LoopReads
from service.deps import SessionDep
from service.encoding import MEDIA_TYPE, OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.estimates import service
from service.examples import ESTIMATE_OP_EXAMPLES, ESTIMATE_OPS_EXAMPLES

router = APIRouter(prefix="/v1/estimate", tags=["estimates"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


# The service's hot path: async, read on the event loop where it can be (`service.estimate_op` says how); the body is
# the item the service rendered and encoded (response_model documents it).
@router.post("/op", response_model=EstimateRead)
async def estimate_op(
    request: Request, body: Annotated[EstimateOpRequest, Body(openapi_examples=ESTIMATE_OP_EXAMPLES)]
) -> Response:
    """Estimate one op on one device: time, FLOPs, bytes and which roof bounds it."""
    return Response(await service.estimate_op(LoopReads.of(request), body), media_type=MEDIA_TYPE)


# The body is rendered by the service (up to 100 000 items: no model per item); response_model documents it.
@router.post("/ops", response_model=EstimateOpsRead)
def estimate_ops(
    session: SessionDep, body: Annotated[EstimateOpsRequest, Body(openapi_examples=ESTIMATE_OPS_EXAMPLES)]
) -> Response:
    """Estimate a list of ops, or one op swept over a grid of sizes (vectorised)."""
    return Response(service.estimate_ops(session, body), media_type="application/json")
