"""HTTP routes of the capacity planner: the plan, and its Pareto chart."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Body, Request, Response

from schemas.jobs import JobKind
from schemas.plan import PlanRead, PlanRequest
from service.auth import ViewerDep
from service.charts.formats import ChartEndpoint, ImageFormat, chart_routes
from service.encoding import MEDIA_TYPE, OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.examples import PLAN_EXAMPLES
from service.heavy import HEAVY_RESPONSES, PARTIAL_HEADER, HeavyDep
from service.jobs.http import ACCEPTED, IdempotencyKey, PreferHeader, accept, wants_async
from service.plan import service

router = APIRouter(
    prefix="/v1", tags=["plan"], responses={**ERROR_RESPONSES, **HEAVY_RESPONSES}, route_class=OrjsonRoute
)
PlanBody = Annotated[PlanRequest, Body(openapi_examples=PLAN_EXAMPLES)]
PARTIAL: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The plan; when it stopped at its time limit with candidates unfinished, `partial` is true "
        f"and the header `{PARTIAL_HEADER}` says how many",
        "headers": {
            PARTIAL_HEADER: {
                "description": "Only on a partial plan: `unfinished=N; candidates=M`",
                "schema": {"type": "string"},
            }
        },
    }
}


# A heavy endpoint (service.heavy): the answer is encoded on the compute's thread (response_model documents it). A
# plan asked with `Prefer: respond-async`, or past what a request answers, is a job (service.jobs): 202 at once,
# without a heavy slot.
@router.post("/plan", response_model=PlanRead, responses={**PARTIAL, **ACCEPTED})
async def plan(
    request: Request,
    heavy: HeavyDep,
    principal: ViewerDep,
    background: BackgroundTasks,
    body: PlanBody,
    prefer: PreferHeader = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """The cheapest fleets that serve a traffic (rates and lengths, or a stored trace) within latency objectives.

    Every candidate deployment simulated under in-flight batching, sized, checked under the traffic, with vLLM and
    TensorRT-LLM launch arguments. A plan past what a request answers (more than 1 500 candidates or 1 000 000
    simulated iterations) runs as a job: 202 and its `Location`, as with `Prefer: respond-async`."""
    asked = wants_async(prefer)
    if asked or body.beyond_request() is not None:
        return await accept(request, background, JobKind.plan, body, principal, idempotency_key, asked)
    answer = await heavy.run(
        lambda session: service.read(session, body), lambda i, s: service.plan(i, body, s), partial=True
    )
    return Response(answer.content, media_type=MEDIA_TYPE, headers=answer.headers)


@chart_routes(router, "POST", "/plan/frontier")
def frontier(fmt: ImageFormat) -> ChartEndpoint:
    """The plan's candidates, output tokens/s per device against per user, with the Pareto frontier."""

    async def draw(heavy: HeavyDep, body: PlanBody) -> Response:
        service.within_request(body)  # a chart is no job: a plan past a request's bounds is a 422 here
        answer = await heavy.run(
            lambda session: service.read(session, body),
            lambda i, s: service.chart(i, body, fmt.suffix, s),
            partial=True,
        )
        return Response(answer.content, media_type=fmt.media_type, headers=answer.headers)

    return draw
