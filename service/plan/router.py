"""HTTP routes of the capacity planner: the plan, and its Pareto chart."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response

from schemas.plan import PlanRead, PlanRequest
from service.charts.formats import ChartEndpoint, ImageFormat, chart_routes
from service.deps import SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import PLAN_EXAMPLES
from service.plan import service

router = APIRouter(prefix="/v1", tags=["plan"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)
PlanBody = Annotated[PlanRequest, Body(openapi_examples=PLAN_EXAMPLES)]


@router.post("/plan")
def plan(session: SessionDep, body: PlanBody) -> PlanRead:
    """The cheapest fleets that serve a traffic (rates and lengths, or a stored trace) within latency objectives.

    Every candidate deployment simulated under in-flight batching, sized, checked under the traffic, with vLLM and
    TensorRT-LLM launch arguments."""
    return service.plan(session, body)


@chart_routes(router, "POST", "/plan/frontier")
def frontier(fmt: ImageFormat) -> ChartEndpoint:
    """The plan's candidates, output tokens/s per device against per user, with the Pareto frontier."""

    def draw(session: SessionDep, body: PlanBody) -> Response:
        return fmt.response(service.chart(session, body, fmt.suffix))

    return draw
