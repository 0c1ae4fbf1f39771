"""The capacity planner: the profiles (and a stored trace the traffic names) resolved, the search run on the serving
simulator (`adapters.plan_serving`, `roofline.serving.plan_serving`), and its frontier drawn
(`service.charts.pareto`)."""

from __future__ import annotations

from sqlalchemy.orm import Session

import adapters
from schemas.estimates import EstimateContext
from schemas.plan import PlanRead, PlanRequest
from service.catalogue import service as catalogue
from service.charts.pareto import Frontier, render
from service.errors import invalid
from service.traces import service as traces


def _trace(session: Session, body: PlanRequest) -> adapters.Trace | None:
    """The stored trace the traffic names, if any, with the search's size checked again on its longest prompt (the
    request's validation could not know it)."""
    if body.traffic.trace_id is None:
        return None
    trace = traces.load(session, body.traffic.trace_id, "body.traffic.trace_id")
    try:
        body.search.check_work(len(body.hardware), int(trace.prompt_tokens.max()))
    except ValueError as err:
        raise invalid("body.search", str(err)) from None
    return trace


def _run(session: Session, body: PlanRequest) -> adapters.PlanOutcome:
    model = catalogue.resolve_model(session, body.model)
    trace = _trace(session, body)
    hardware = []
    for i, ref in enumerate(body.hardware):
        ctx = EstimateContext(hardware=ref, options=body.options)
        spec, name = catalogue.resolve_hardware(session, ctx, f"body.hardware.{i}")
        system = adapters.inference_system(spec, ctx, None)
        hardware.append(adapters.Hardware(name, system, adapters.host_link(spec.interconnect)))
    return adapters.plan_serving(body, model, hardware, trace)


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
