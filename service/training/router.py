"""HTTP routes for training: one step's estimate and the search for the fastest layout."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Body, Request

from schemas.jobs import JobKind
from schemas.training import TrainingRead, TrainingRequest
from schemas.training_plan import TrainingPlanRead, TrainingPlanRequest
from service.auth import ViewerDep
from service.deps import SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import TRAINING_EXAMPLES, TRAINING_PLAN_EXAMPLES
from service.jobs.http import ACCEPTED, IdempotencyKey, PreferHeader, accepted, wants_async
from service.training import service

router = APIRouter(prefix="/v1", tags=["training"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


@router.post("/estimate/training")
def estimate_training(
    session: SessionDep, body: Annotated[TrainingRequest, Body(openapi_examples=TRAINING_EXAMPLES)]
) -> TrainingRead:
    """Estimate one training step: its anatomy, communication, memory per device, MFU and time to train."""
    return service.estimate(session, body)


@router.post("/plan/training", response_model=TrainingPlanRead, responses=ACCEPTED)
def plan_training(
    request: Request,
    session: SessionDep,
    principal: ViewerDep,
    background: BackgroundTasks,
    body: Annotated[TrainingPlanRequest, Body(openapi_examples=TRAINING_PLAN_EXAMPLES)],
    prefer: PreferHeader = None,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """Search layouts (data, tensor, pipeline, sharding, micro-batch, recomputation) for the fastest that fit."""
    if wants_async(prefer):
        return accepted(request, session, background, JobKind.plan_training, body, principal, idempotency_key, True)
    return service.plan(session, body)
