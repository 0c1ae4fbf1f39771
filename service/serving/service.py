"""Rules for serving estimates: the model and profile resolved as for inference runs, a stored trace read when the
load names one, then the simulation (its iterations costed with the shipped model); `options.calibration` applies a
serving calibration (`service.calibrations.serving`, fitted on measured load tests) to its figures. The mapping to
the core and back is `adapters`'."""

from __future__ import annotations

from sqlalchemy.orm import Session

import adapters
from schemas.serving import ServingRead, ServingRequest
from service.calibrations import serving as serving_calibrations
from service.catalogue import service as catalogue
from service.traces import service as traces


def estimate(session: Session, body: ServingRequest) -> ServingRead:
    model = catalogue.resolve_model(session, body.model)
    spec, name = catalogue.resolve_hardware(session, body)
    system = adapters.inference_system(spec, body, None)
    trace = None if body.load.trace_id is None else traces.load(session, body.load.trace_id, "body.load.trace_id")
    doc = adapters.estimate_serving(body, model, (spec, name, system), trace)
    if body.options.calibration != "none":
        fix, note = serving_calibrations.choose(session, catalogue.calibration_slug(body), body.options.calibration)
        if fix is not None:
            doc = adapters.calibrate_serving(doc, fix, closed_loop=body.load.concurrency is not None)
        doc["assumptions"]["calibration"] = note
    return ServingRead.model_validate(doc)
