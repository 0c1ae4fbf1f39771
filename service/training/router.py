"""HTTP routes for training: one step's estimate and the search for the fastest layout."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Body, Request, Response

from schemas.jobs import JobKind
from schemas.training import TrainingRead, TrainingRequest
from schemas.training_plan import TrainingPlanRead, TrainingPlanRequest
from service.auth import ViewerDep
from service.deps import SessionDep
from service.encoding import MEDIA_TYPE, OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import TRAINING_EXAMPLES, TRAINING_PLAN_EXAMPLES
from service.heavy import HEAVY_RESPONSES, PARTIAL_HEADER, HeavyDep
from service.jobs.http import ACCEPTED, IdempotencyKey, PreferHeader, accept, wants_async
from service.training import service

router = APIRouter(prefix="/v1", tags=["training"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


@router.post("/estimate/training")
def estimate_training(
    session: SessionDep, body: Annotated[TrainingRequest, Body(openapi_examples=TRAINING_EXAMPLES)]
) -> TrainingRead:
    """Estimate one training step: its anatomy, communication, memory per device, MFU and time to train."""
    return service.estimate(session, body)


PARTIAL: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The plan; when it stopped at its time limit with configurations unfinished, `partial` is true "
        f"and the header `{PARTIAL_HEADER}` says how many",
        "headers": {PARTIAL_HEADER: {"description": "Only on a partial plan: `unfinished=N; candidates=M`",
                                     "schema": {"type": "string"}}},
    }
}  # fmt: skip


# A heavy endpoint (service.heavy): the answer is encoded on the compute's thread (response_model documents it). With
# `Prefer: respond-async` it is a job (service.jobs): 202 at once, without a heavy slot.
@router.post("/plan/training", response_model=TrainingPlanRead, responses={**HEAVY_RESPONSES, **PARTIAL, **ACCEPTED})
async def plan_training(
    request: Request,
    heavy: HeavyDep,
    principal: ViewerDep,
    background: BackgroundTasks,
    body: Annotated[TrainingPlanRequest, Body(openapi_examples=TRAINING_PLAN_EXAMPLES)],
    prefer: PreferHeader = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Search layouts (data, tensor, pipeline, sharding, micro-batch, recomputation) for the fastest that fit."""
    if wants_async(prefer):
        return await accept(request, background, JobKind.plan_training, body, principal, idempotency_key, True)
    content, headers = await heavy.run(
        lambda session: service.read_plan(session, body), lambda i, s: service.plan(i, body, s), partial=True
    )
    return Response(content, media_type=MEDIA_TYPE, headers=headers)
