"""Rules for serving estimates: the model and profile resolved as for inference runs (no calibration: the simulator
costs iterations with the shipped model), a stored trace read when the load names one, then the simulation. The
mapping to the core and back is `adapters`'."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

import adapters
from schemas.serving import ServingRead, ServingRequest
from service.catalogue import service as catalogue
from service.jobs.work import Piece, Work
from service.traces import service as traces


def estimate(session: Session, body: ServingRequest) -> ServingRead:
    model = catalogue.resolve_model(session, body.model)
    spec, name = catalogue.resolve_hardware(session, body)
    system = adapters.inference_system(spec, body, None)
    trace = None if body.load.trace_id is None else traces.load(session, body.load.trace_id, "body.load.trace_id")
    return ServingRead.model_validate(adapters.estimate_serving(body, model, (spec, name, system), trace))


def job(session: Session, body: ServingRequest, chunks: int) -> Work:
    """The serving estimate as a job: the simulation (`adapters.estimate_serving`, as `estimate` runs it) in one
    task."""
    model = catalogue.resolve_model(session, body.model)
    spec, name = catalogue.resolve_hardware(session, body)
    system = adapters.inference_system(spec, body, None)
    trace = None if body.load.trace_id is None else traces.load(session, body.load.trace_id, "body.load.trace_id")
    return Work([Piece(adapters.estimate_serving, (body, model, (spec, name, system), trace))], _serving_read)


def _serving_read(doc: dict[str, Any]) -> ServingRead:
    return ServingRead.model_validate(doc)
