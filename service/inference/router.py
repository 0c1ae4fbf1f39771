"""HTTP routes for whole inference runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from schemas.inference import InferenceBatchRead, InferenceBatchRequest, InferenceRead, InferenceRequest
from service.deps import SessionDep
from service.errors import ERROR_RESPONSES
from service.examples import INFERENCE_BATCH_EXAMPLES, INFERENCE_EXAMPLES
from service.inference import service

router = APIRouter(prefix="/v1/estimate", tags=["inference"], responses=ERROR_RESPONSES)


@router.post("/inference")
def estimate_inference(
    session: SessionDep, body: Annotated[InferenceRequest, Body(openapi_examples=INFERENCE_EXAMPLES)]
) -> InferenceRead:
    """Estimate a whole inference run: prefill, decode steps, memory per device, communication and cost."""
    return service.estimate(session, body)


@router.post("/inference/batch")
def estimate_inference_batch(
    session: SessionDep, body: Annotated[InferenceBatchRequest, Body(openapi_examples=INFERENCE_BATCH_EXAMPLES)]
) -> InferenceBatchRead:
    """Estimate many inference runs at once: a list of requests, or a sweep over a grid of fields."""
    return service.estimate_batch(session, body)
