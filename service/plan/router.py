"""HTTP routes of the capacity planner: the plan, and its Pareto chart."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Body, Request, Response

from schemas.jobs import JobKind
from schemas.plan import PlanRead, PlanRequest
from service.auth import ViewerDep
from service.charts.formats import ChartEndpoint, ImageFormat, chart_routes
from service.deps import SessionDep
from service.encoding import OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import PLAN_EXAMPLES
from service.jobs.http import ACCEPTED, IdempotencyKey, PreferHeader, accepted, wants_async
from service.plan import service

router = APIRouter(prefix="/v1", tags=["plan"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)
PlanBody = Annotated[PlanRequest, Body(openapi_examples=PLAN_EXAMPLES)]


@router.post("/plan", response_model=PlanRead, responses=ACCEPTED)
def plan(
    request: Request,
    session: SessionDep,
    principal: ViewerDep,
    background: BackgroundTasks,
    body: PlanBody,
    prefer: PreferHeader = None,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """The cheapest fleets that serve a traffic (rates and lengths, or a stored trace) within latency objectives.

    Every candidate deployment simulated under in-flight batching, sized, checked under the traffic, with vLLM and
    TensorRT-LLM launch arguments. A plan past what a request answers (more than 1 500 candidates or 1 000 000
    simulated iterations) runs as a job: 202 and its `Location`, as with `Prefer: respond-async`."""
    asked = wants_async(prefer)
    if asked or body.beyond_request() is not None:
        return accepted(request, session, background, JobKind.plan, body, principal, idempotency_key, asked)
    return service.plan(session, body)


@chart_routes(router, "POST", "/plan/frontier")
def frontier(fmt: ImageFormat) -> ChartEndpoint:
    """The plan's candidates, output tokens/s per device against per user, with the Pareto frontier."""

    def draw(session: SessionDep, body: PlanBody) -> Response:
        return fmt.response(service.chart(session, body, fmt.suffix))

    return draw
