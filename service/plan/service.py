"""The capacity planner: the profiles (and a stored trace the traffic names) resolved, the search run on the serving
simulator (`adapters.plan_serving`, `roofline.serving.plan_serving`), and its frontier drawn
(`service.charts.pareto`)."""

from __future__ import annotations

from sqlalchemy.orm import Session

import adapters
import roofline
from schemas import limits
from schemas.estimates import EstimateContext
from schemas.plan import PlanRead, PlanRequest
from service.catalogue import service as catalogue
from service.charts.pareto import Frontier, render
from service.errors import invalid
from service.jobs.work import Piece, Work, contiguous
from service.traces import service as traces


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


def _search(session: Session, body: PlanRequest, limit: int) -> adapters.PlanSearch:
    model = catalogue.resolve_model(session, body.model)
    trace = _trace(session, body, limit)
    hardware = []
    for i, ref in enumerate(body.hardware):
        ctx = EstimateContext(hardware=ref, options=body.options)
        spec, name = catalogue.resolve_hardware(session, ctx, f"body.hardware.{i}")
        hardware.append(adapters.Hardware(name, adapters.inference_system(spec, ctx, None)))
    return adapters.prepare_plan(body, model, hardware, trace)


def _run(session: Session, body: PlanRequest) -> adapters.PlanOutcome:
    return adapters.plan_in_process(_search(session, body, limits.MAX_PLAN_SIMULATED_ITERATIONS))


# Candidates a piece holds at least: each piece builds the iteration-time surfaces of its engines (20-40 ms each,
# schemas.limits), as long as ~5 candidates take to simulate.
MIN_PIECE = 50


def job(session: Session, body: PlanRequest, chunks: int) -> Work:
    """The plan as a job: its candidates' families in about `chunks` pieces, each evaluated by the core as the
    synchronous plan does (`roofline.serving.evaluate`), then reduced (`roofline.serving.reduce`) with no deadline."""
    s = _search(session, body, limits.MAX_JOB_PLAN_SIMULATED_ITERATIONS)
    core = roofline.serving
    build = core.surface_cache(s.deployments, s.prompt, s.output)  # empty: each task builds the same surfaces
    pieces = [
        Piece(core.evaluate, ([(i, s.deployments[i], s.prices[i]) for i in chunk], s.prompt, s.output, s.targets,
              s.demand, build, body.search.max_devices, limits.MAX_DEVICES), len(chunk))
        for chunk in contiguous(core.families(s.deployments), min(chunks, -(-len(s.deployments) // MIN_PIECE)))
    ]  # fmt: skip
    priced = all(p is not None for p in s.prices)
    args = (priced, s.prompt, s.output, s.targets, s.demand, build, body.max_results, body.traffic.seed,
            limits.MAX_DEVICES)  # fmt: skip

    def finish(plan: roofline.serving.ServingPlan) -> PlanRead:
        return PlanRead.model_validate(adapters.finish_plan(s, plan).doc)

    return Work(pieces, finish, core.reduce, args)


def plan(session: Session, body: PlanRequest) -> PlanRead:
    """Simulate every candidate, size each to the traffic, check the best under it and rank them."""
    return PlanRead.model_validate(_run(session, body).doc)


def chart(session: Session, body: PlanRequest, fmt: str) -> bytes:
    """The plan's Pareto chart as `fmt` ("svg" or "png") bytes."""
    outcome = _run(session, body)
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
    return render(frontier, fmt)
