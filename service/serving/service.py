"""Rules for serving estimates: the model and profile resolved as for inference runs (no calibration: the simulator
costs iterations with the shipped model), a stored trace read when the load names one, then the simulation. The
mapping to the core and back is `adapters`'. A heavy endpoint (`service.heavy`): `read` holds the session, `estimate`
computes without one; as a job (`job`), the simulation runs in one task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

import adapters
import roofline
from schemas.hardware import HardwareSpec
from schemas.models import ModelSpec
from schemas.serving import ServingRead, ServingRequest
from service import encoding
from service.catalogue import service as catalogue
from service.jobs.work import Piece, Work
from service.traces import service as traces


@dataclass(frozen=True)
class Inputs:
    model: tuple[ModelSpec, str]
    hardware: tuple[HardwareSpec, str, roofline.System]
    trace: adapters.Trace | None


def read(session: Session, body: ServingRequest) -> Inputs:
    """What the simulation needs from the database: the model, the profile, the trace the load names."""
    model = catalogue.resolve_model(session, body.model)
    spec, name = catalogue.resolve_hardware(session, body)
    system = adapters.inference_system(spec, body, None)
    trace = None if body.load.trace_id is None else traces.load(session, body.load.trace_id, "body.load.trace_id")
    return Inputs(model, (spec, name, system), trace)


def estimate(inputs: Inputs, body: ServingRequest, should_stop: roofline.StopCheck) -> bytes:
    """The simulation, its answer encoded (`roofline.Stopped` when `should_stop` says so first)."""
    doc = adapters.estimate_serving(body, inputs.model, inputs.hardware, inputs.trace, should_stop)
    return encoding.dumps(ServingRead.model_validate(doc).model_dump(mode="json"))


def job(session: Session, body: ServingRequest, chunks: int) -> Work:
    """The serving estimate as a job: the simulation (`adapters.estimate_serving`, as `estimate` runs it, to the end:
    a cancelled job's task is stopped by the runner) in one task."""
    inputs = read(session, body)
    return Work([Piece(adapters.estimate_serving, (body, inputs.model, inputs.hardware, inputs.trace))], _serving_read)


def _serving_read(doc: dict[str, Any]) -> ServingRead:
    return ServingRead.model_validate(doc)
