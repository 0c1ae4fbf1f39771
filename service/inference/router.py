"""HTTP routes for whole inference runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response

from schemas.inference import InferenceBatchRead, InferenceBatchRequest, InferenceRead, InferenceRequest
from service.catalogue.loopread import LoopReads
from service.deps import SessionDep
from service.encoding import MEDIA_TYPE, OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import INFERENCE_BATCH_EXAMPLES, INFERENCE_EXAMPLES
from service.inference import service

router = APIRouter(prefix="/v1/estimate", tags=["inference"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


# On the op endpoint's hot path where it can be (`service.estimate_inference` says when); the body is the document
# the service built and encoded (response_model documents it).
@router.post("/inference", response_model=InferenceRead)
async def estimate_inference(
    request: Request, body: Annotated[InferenceRequest, Body(openapi_examples=INFERENCE_EXAMPLES)]
) -> Response:
    """Estimate a whole inference run: prefill, decode steps, memory per device, communication and cost."""
    return Response(await service.estimate_inference(LoopReads.of(request), body), media_type=MEDIA_TYPE)


@router.post("/inference/batch")
def estimate_inference_batch(
    session: SessionDep, body: Annotated[InferenceBatchRequest, Body(openapi_examples=INFERENCE_BATCH_EXAMPLES)]
) -> InferenceBatchRead:
    """Estimate many inference runs at once: a list of requests, or a sweep over a grid of fields."""
    return service.estimate_batch(session, body)
