"""HTTP routes of the capacity planner: the plan, and its Pareto chart."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response

from schemas.plan import PlanRead, PlanRequest
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


@router.post(
    "/plan/frontier.svg",
    response_class=Response,
    responses={200: {"content": {"image/svg+xml": {}}, "description": "The chart, SVG"}},
)
def frontier_svg(session: SessionDep, body: PlanBody) -> Response:
    """The plan's candidates, output tokens/s per device against per user, with the Pareto frontier (SVG)."""
    return Response(service.chart(session, body, "svg"), media_type="image/svg+xml")


@router.post(
    "/plan/frontier.png",
    response_class=Response,
    responses={200: {"content": {"image/png": {}}, "description": "The chart, PNG"}},
)
def frontier_png(session: SessionDep, body: PlanBody) -> Response:
    """The plan's candidates, output tokens/s per device against per user, with the Pareto frontier (PNG)."""
    return Response(service.chart(session, body, "png"), media_type="image/png")
