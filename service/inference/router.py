"""HTTP routes for whole inference runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response
from sqlalchemy.orm import Session

from schemas.inference import InferenceBatchRead, InferenceBatchRequest, InferenceRead, InferenceRequest
from service.deps import SessionDep, in_unit_of_work
from service.encoding import ORJSONResponse, OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import INFERENCE_BATCH_EXAMPLES, INFERENCE_EXAMPLES
from service.inference import service

router = APIRouter(prefix="/v1/estimate", tags=["inference"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


# The op endpoint's hot path (service.estimates.router says why): on the event loop when one digest read each
# settles the model and the profile and no calibration is asked for (one run: ~3 ms of numpy, at most ~20 ms for the
# longest decode the limits allow, sampled), else one trip through the thread pool (service.deps.in_unit_of_work).
# The model the service built is encoded as is, not validated a second time by FastAPI (response_model documents it;
# tests/service/test_encoding.py checks the body).
@router.post("/inference", response_model=InferenceRead)
async def estimate_inference(
    request: Request, body: Annotated[InferenceRequest, Body(openapi_examples=INFERENCE_EXAMPLES)]
) -> Response:
    """Estimate a whole inference run: prefill, decode steps, memory per device, communication and cost."""
    resolver = await service.Resolver.on_loop(request.app.state.digests, body)
    if resolver is not None:
        return ORJSONResponse(service.estimate(resolver, body).model_dump(mode="json"))

    def work(session: Session) -> Response:
        return ORJSONResponse(service.estimate(session, body).model_dump(mode="json"))

    return await in_unit_of_work(request, work, read_only=True)


@router.post("/inference/batch")
def estimate_inference_batch(
    session: SessionDep, body: Annotated[InferenceBatchRequest, Body(openapi_examples=INFERENCE_BATCH_EXAMPLES)]
) -> InferenceBatchRead:
    """Estimate many inference runs at once: a list of requests, or a sweep over a grid of fields."""
    return service.estimate_batch(session, body)
