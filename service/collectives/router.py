"""HTTP route for collective estimates."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response
from sqlalchemy.orm import Session

from schemas.collectives import CollectiveRead, CollectiveRequest
from service.collectives import service
from service.deps import in_unit_of_work
from service.encoding import ORJSONResponse, OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import COLLECTIVE_EXAMPLES

router = APIRouter(prefix="/v1/estimate", tags=["collectives"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


# The op endpoint's hot path (service.estimates.router says why): on the event loop when one digest read there
# settles the profile, else one trip through the thread pool (service.deps.in_unit_of_work). The model the service
# built is encoded as is, not validated a second time by FastAPI (response_model documents it;
# tests/service/test_encoding.py checks the body).
@router.post("/collective", response_model=CollectiveRead)
async def estimate_collective(
    request: Request, body: Annotated[CollectiveRequest, Body(openapi_examples=COLLECTIVE_EXAMPLES)]
) -> Response:
    """Estimate a collective (all-reduce, all-gather, …) on a device's own fabric or an explicit topology."""
    resolved = await service.resolve_on_loop(request.app.state.digests, body)
    if resolved is not None:
        return ORJSONResponse(service.estimate_on(*resolved, body).model_dump(mode="json"))

    def work(session: Session) -> Response:
        return ORJSONResponse(service.estimate(session, body).model_dump(mode="json"))

    return await in_unit_of_work(request, work, read_only=True)
