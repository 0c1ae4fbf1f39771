"""Rules for serving estimates: the model and profile resolved as for inference runs, a stored trace read when the
load names one, then the simulation (its iterations costed with the shipped model); `options.calibration` applies a
serving calibration (`service.calibrations.serving`, fitted on measured load tests) to its figures. The mapping to
the core and back is `adapters`'. A heavy endpoint (`service.heavy`): `read` holds the session, `estimate` computes
without one; as a job (`job`), the simulation runs in one task."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

import adapters
import roofline
from schemas.hardware import HardwareSpec
from schemas.models import ModelSpec
from schemas.serving import ServingRead, ServingRequest
from service import encoding
from service.calibrations import serving as serving_calibrations
from service.catalogue import service as catalogue
from service.jobs.work import Piece, Work
from service.traces import service as traces


@dataclass(frozen=True)
class Inputs:
    model: tuple[ModelSpec, str]
    hardware: tuple[HardwareSpec, str, roofline.System]
    trace: adapters.Trace | None
    calibration: tuple[adapters.ServingCorrection | None, str] | None  # (the fit, its note); None: not asked


def read(session: Session, body: ServingRequest) -> Inputs:
    """What the simulation needs from the database: the model, the profile, the trace the load names, and the
    serving calibration `options.calibration` chooses."""
    model = catalogue.resolve_model(session, body.model)
    spec, name = catalogue.resolve_hardware(session, body)
    system = adapters.inference_system(spec, body, None)
    trace = None if body.load.trace_id is None else traces.load(session, body.load.trace_id, "body.load.trace_id")
    calibration = None
    if body.options.calibration != "none":
        calibration = serving_calibrations.choose(session, catalogue.calibration_slug(body), body.options.calibration)
    return Inputs(model, (spec, name, system), trace, calibration)


def document(inputs: Inputs, body: ServingRequest, should_stop: roofline.StopCheck) -> ServingRead:
    """The simulation (`roofline.Stopped` when `should_stop` says so first), calibrated when asked."""
    doc = adapters.estimate_serving(body, inputs.model, inputs.hardware, inputs.trace, should_stop)
    return _calibrated(inputs, body, doc)


def estimate(inputs: Inputs, body: ServingRequest, should_stop: roofline.StopCheck) -> bytes:
    """The simulation's answer, encoded."""
    return encoding.dumps(document(inputs, body, should_stop).model_dump(mode="json"))


def job(session: Session, body: ServingRequest, chunks: int) -> Work:
    """The serving estimate as a job: the simulation (`adapters.estimate_serving`, as `estimate` runs it, to the end:
    a cancelled job's task is stopped by the runner) in one task, calibrated as `document` calibrates it."""
    inputs = read(session, body)
    return Work(
        [Piece(adapters.estimate_serving, (body, inputs.model, inputs.hardware, inputs.trace))],
        functools.partial(_calibrated, inputs, body),
    )


def _calibrated(inputs: Inputs, body: ServingRequest, doc: dict[str, Any]) -> ServingRead:
    if inputs.calibration is not None:
        fix, note = inputs.calibration
        if fix is not None:
            doc = adapters.calibrate_serving(doc, fix, closed_loop=body.load.concurrency is not None)
        doc["assumptions"]["calibration"] = note
    return ServingRead.model_validate(doc)
