"""HTTP routes for training: one step's estimate and the search for the fastest layout."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from schemas.training import TrainingRead, TrainingRequest
from schemas.training_plan import TrainingPlanRead, TrainingPlanRequest
from service.deps import SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import TRAINING_EXAMPLES, TRAINING_PLAN_EXAMPLES
from service.training import service

router = APIRouter(prefix="/v1", tags=["training"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


@router.post("/estimate/training")
def estimate_training(
    session: SessionDep, body: Annotated[TrainingRequest, Body(openapi_examples=TRAINING_EXAMPLES)]
) -> TrainingRead:
    """Estimate one training step: its anatomy, communication, memory per device, MFU and time to train."""
    return service.estimate(session, body)


@router.post("/plan/training")
def plan_training(
    session: SessionDep, body: Annotated[TrainingPlanRequest, Body(openapi_examples=TRAINING_PLAN_EXAMPLES)]
) -> TrainingPlanRead:
    """Search layouts (data, tensor, pipeline, sharding, micro-batch, recomputation) for the fastest that fit."""
    return service.plan(session, body)
