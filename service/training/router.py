"""HTTP route for training-step estimates."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from schemas.training import TrainingRead, TrainingRequest
from service.deps import SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import TRAINING_EXAMPLES
from service.training import service

router = APIRouter(prefix="/v1/estimate", tags=["training"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


@router.post("/training")
def estimate_training(
    session: SessionDep, body: Annotated[TrainingRequest, Body(openapi_examples=TRAINING_EXAMPLES)]
) -> TrainingRead:
    """Estimate one training step: its anatomy, communication, memory per device, MFU and time to train."""
    return service.estimate(session, body)
