"""HTTP route of the capacity planner."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from schemas.plan import PlanRead, PlanRequest
from service.deps import SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import PLAN_EXAMPLES
from service.plan import service

router = APIRouter(prefix="/v1", tags=["inference"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


@router.post("/plan")
def plan(session: SessionDep, body: Annotated[PlanRequest, Body(openapi_examples=PLAN_EXAMPLES)]) -> PlanRead:
    """Find the cheapest configurations (hardware, parallelism, batch, dtypes) that serve a traffic within SLOs."""
    return service.plan(session, body)
