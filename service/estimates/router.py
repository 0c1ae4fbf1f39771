"""HTTP routes for op estimates."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response
from sqlalchemy.orm import Session

from schemas.estimates import EstimateOpRequest, EstimateOpsRead, EstimateOpsRequest, EstimateRead
from schemas.hardware import HardwareSpec
from service.deps import SessionDep, in_unit_of_work
from service.encoding import ORJSONResponse, OrjsonRoute
from service.errors import ERROR_RESPONSES
from service.estimates import service
from service.examples import ESTIMATE_OP_EXAMPLES, ESTIMATE_OPS_EXAMPLES

router = APIRouter(prefix="/v1/estimate", tags=["estimates"], responses=ERROR_RESPONSES, route_class=OrjsonRoute)


# The hot path of the service, written for it (bench/throughput.py):
# - no trip through the thread pool when the answer needs no session: an inline profile, or a catalogue profile whose
#   digest `service.catalogue.loopread` reads on the loop (SQLite in place, PostgreSQL awaited on an async pool) and
#   whose parse is cached. The op itself is computed on the loop: ~0.1-0.3 ms of numpy, at most ~4 ms for a chain of
#   MAX_CHAIN_OPS ops, and a thread would not run it beside the loop anyway (the GIL);
# - otherwise (calibration, a profile not parsed yet in this process, a reader that cannot answer) one trip, not
#   three: a sync endpoint with SessionDep crosses to a worker thread to open the session, again to run, and again
#   to commit; here the whole unit of work runs in one call (`service.deps.in_unit_of_work`: the same unit of work,
#   with the request's deadline, that SessionDep uses);
# - the body is the item `item_dict` renders (plain numbers, exactly EstimateRead's fields, checked finite),
#   encoded as is, not validated again as a model by FastAPI; tests/service/test_encoding.py validates the answer
#   against EstimateRead.
@router.post("/op", response_model=EstimateRead)
async def estimate_op(
    request: Request, body: Annotated[EstimateOpRequest, Body(openapi_examples=ESTIMATE_OP_EXAMPLES)]
) -> Response:
    """Estimate one op on one device: time, FLOPs, bytes and which roof bounds it."""

    def estimate(spec: HardwareSpec, name: str, session: Session | None) -> Response:
        hw = service.to_core(spec, body)
        est = service.with_assumptions(service.evaluate(hw, body.op), hw, name)
        if session is not None:
            est = service.calibrated(session, body, body.op, est)
        return ORJSONResponse(service.item_dict(est))

    if body.options.calibration == "none":
        resolved = await service.resolve_hardware_on_loop(request.app.state.digests, body)
        if resolved is not None:
            return estimate(*resolved, None)

    def work(session: Session) -> Response:
        return estimate(*service.resolve_hardware(session, body), session)

    return await in_unit_of_work(request, work, read_only=True)


# The body is rendered by the service (up to 100 000 items: no model per item); response_model documents it.
@router.post("/ops", response_model=EstimateOpsRead)
def estimate_ops(
    session: SessionDep, body: Annotated[EstimateOpsRequest, Body(openapi_examples=ESTIMATE_OPS_EXAMPLES)]
) -> Response:
    """Estimate a list of ops, or one op swept over a grid of sizes (vectorised)."""
    spec, name = service.resolve_hardware(session, body)
    hw = service.to_core(spec, body)
    if body.sweep is not None:
        est, grid = service.sweep(hw, body.sweep)
        items = service.item_dicts(service.with_assumptions(est, hw, name))
        if body.options.calibration != "none":
            service.calibrated_items(session, body, service.sweep_docs(body.sweep, grid), items)
        content = service.ops_json(items, grid)
    else:
        items = service.estimate_ops(hw, body.ops or [], name)
        if body.options.calibration != "none":
            service.calibrated_items(session, body, [op.model_dump(mode="json") for op in body.ops or []], items)
        content = service.ops_json(items)
    return Response(content, media_type="application/json")
