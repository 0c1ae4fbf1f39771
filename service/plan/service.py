"""The capacity planner: the profiles (and a stored trace the traffic names) resolved, the search run on the serving
simulator (`adapters.plan_serving`, `roofline.serving.plan_serving`), and its frontier drawn
(`service.charts.pareto`). A heavy endpoint (`service.heavy`): `read` holds the session, `plan` and `chart` compute
without one, until `should_stop` says the request's time is up, and answer what they have (`partial`). A plan past
what a request answers runs as a job (`job`): its families evaluated in pieces, then reduced, on Ray."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

import adapters
import roofline
from schemas import limits
from schemas.estimates import EstimateContext
from schemas.models import ModelSpec
from schemas.plan import PlanRead, PlanRequest
from service import encoding
from service.catalogue import service as catalogue
from service.charts.pareto import Frontier, render
from service.errors import invalid
from service.heavy import partial_header
from service.jobs.work import Piece, Work, contiguous
from service.traces import service as traces


@dataclass(frozen=True)
class Inputs:
    model: tuple[ModelSpec, str]
    hardware: list[adapters.Hardware]
    trace: adapters.Trace | None


@dataclass(frozen=True)
class Answer:
    """An encoded answer and its headers (`Ridgeline-Partial` when the plan stopped with candidates unfinished)."""

    content: bytes
    headers: dict[str, str]


def _trace(session: Session, body: PlanRequest, limit: int) -> adapters.Trace | None:
    """The stored trace the traffic names, if any, with the search's size checked again on its longest prompt (the
    request's validation could not know it) against `limit` iterations (a request's or a job's)."""
    if body.traffic.trace_id is None:
        return None
    trace = traces.load(session, body.traffic.trace_id, "body.traffic.trace_id")
    try:
        body.search.check_work(len(body.hardware), int(trace.prompt_tokens.max()), limit)
    except ValueError as err:
        raise invalid("body.search", str(err)) from None
    return trace


def _read(session: Session, body: PlanRequest, limit: int) -> Inputs:
    model = catalogue.resolve_model(session, body.model)
    trace = _trace(session, body, limit)
    hardware = []
    for i, ref in enumerate(body.hardware):
        ctx = EstimateContext(hardware=ref, options=body.options)
        spec, name = catalogue.resolve_hardware(session, ctx, f"body.hardware.{i}")
        system = adapters.inference_system(spec, ctx, None)
        hardware.append(adapters.Hardware(name, system, adapters.host_link(spec.interconnect)))
    return Inputs(model, hardware, trace)


def read(session: Session, body: PlanRequest) -> Inputs:
    """What the search needs from the database: the model, the profiles, the trace the traffic names (its work within
    a request's bound)."""
    return _read(session, body, limits.MAX_PLAN_SIMULATED_ITERATIONS)


def within_request(body: PlanRequest) -> None:
    """A 422 (naming `body.search`) for a plan past what a request answers, where it cannot run as a job (a chart)."""
    why = body.beyond_request()
    if why is not None:
        message = f"{why}: a chart is drawn within a request (POST /v1/plan runs such a plan as a job)"
        raise invalid("body.search", message)


def _headers(outcome: adapters.PlanOutcome) -> dict[str, str]:
    doc = outcome.doc
    return partial_header(doc["unfinished"], doc["candidates"]) if doc["partial"] else {}


def document(inputs: Inputs, body: PlanRequest, should_stop: roofline.StopCheck) -> tuple[PlanRead, dict[str, str]]:
    """Simulate every candidate, size each to the traffic, check the best under it and rank them; the plan, and
    its headers."""
    outcome = adapters.plan_serving(body, inputs.model, inputs.hardware, inputs.trace, should_stop)
    return PlanRead.model_validate(outcome.doc), _headers(outcome)


def plan(inputs: Inputs, body: PlanRequest, should_stop: roofline.StopCheck) -> Answer:
    """The plan (`document`), encoded."""
    model, headers = document(inputs, body, should_stop)
    return Answer(encoding.dumps(model.model_dump(mode="json")), headers)


# Candidates a piece holds at least: each piece builds the iteration-time surfaces of its engines (20-40 ms each,
# schemas.limits), as long as ~5 candidates take to simulate.
MIN_PIECE = 50


def job(session: Session, body: PlanRequest, chunks: int) -> Work:
    """The plan as a job: its candidates' families in about `chunks` pieces, each evaluated by the core as the
    synchronous plan does (`roofline.serving.evaluate`, with the traffic's shared requests when it has them), then
    reduced (`roofline.serving.reduce`) with no deadline: a job runs to the end, and a cancelled one's tasks are
    stopped by the runner."""
    inputs = _read(session, body, limits.MAX_JOB_PLAN_SIMULATED_ITERATIONS)
    s = adapters.prepare_plan(body, inputs.model, inputs.hardware, inputs.trace)
    core = roofline.serving
    build = core.surface_cache(s.deployments, s.prompt, s.output)  # empty: each task builds the same surfaces
    pieces = [
        Piece(core.evaluate, ([(i, s.deployments[i], s.prices[i]) for i in chunk], s.prompt, s.output, s.targets,
              s.demand, build, body.search.max_devices, limits.MAX_DEVICES, roofline.never, s.sample), len(chunk))
        for chunk in contiguous(core.families(s.deployments), min(chunks, -(-len(s.deployments) // MIN_PIECE)))
    ]  # fmt: skip
    priced = all(p is not None for p in s.prices)
    args = (priced, s.prompt, s.output, s.targets, s.demand, build, body.max_results, body.traffic.seed,
            limits.MAX_DEVICES, roofline.never, s.sample)  # fmt: skip

    def finish(plan: roofline.serving.ServingPlan) -> PlanRead:
        return PlanRead.model_validate(adapters.finish_plan(s, plan).doc)

    return Work(pieces, finish, core.reduce, args)


def chart(inputs: Inputs, body: PlanRequest, fmt: str, should_stop: roofline.StopCheck) -> Answer:
    """The plan's Pareto chart as `fmt` ("svg" or "png") bytes."""
    outcome = adapters.plan_serving(body, inputs.model, inputs.hardware, inputs.trace, should_stop)
    result, doc = outcome.plan, outcome.doc
    chosen = result.feasible[0] if result.feasible else None
    frontier = Frontier(
        title=f"{doc['model']}: {len(result.entries)} candidates at their operating points, "
        f"{doc['demand_requests_per_s']:.3g} requests/s",
        per_user=[e.point.output_tokens_per_s_per_user for e in result.entries],
        per_device=[e.point.output_tokens_per_s_per_device for e in result.entries],
        group=outcome.groups,
        meets=[not e.point.misses for e in result.entries],
        frontier=list(result.frontier),
        chosen=next((i for i, e in enumerate(result.entries) if chosen is not None and e.index == chosen.index), None),
        chosen_label=doc["feasible"][0]["label"] if doc["feasible"] else "",
        tpot_s=body.objectives.tpot_s,
    )
    return Answer(render(frontier, fmt), _headers(outcome))
