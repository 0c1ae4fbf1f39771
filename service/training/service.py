"""Rules for training-step estimates and plans: which model and which profile (catalogue or inline, with the
request's patch and options); the mapping to the core and back is `adapters`' (`training_run`, `estimate_training`,
`render_training`, `plan_training`, `render_training_plan`). No formulas here. The plan is a heavy endpoint
(`service.heavy`): `read_plan` holds the session, `plan` computes without one until `should_stop` says the request's
time is up, and answers what it has (`partial`). As a job (`plan_job`), the search runs to the end in one task."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

import adapters
import roofline
from schemas.hardware import HardwareSpec
from schemas.models import ModelSpec
from schemas.training import TrainingRead, TrainingRequest
from schemas.training_plan import TrainingPlanRead, TrainingPlanRequest
from service import encoding
from service.catalogue import service as catalogue
from service.heavy import partial_header
from service.jobs.work import Piece, Work


def estimate(session: Session, body: TrainingRequest) -> TrainingRead:
    """One training step on the request's model and profile."""
    model, model_name = catalogue.resolve_model(session, body.model)
    spec, hardware_name = catalogue.resolve_hardware(session, body)
    system = adapters.inference_system(spec, body, None)
    run = adapters.training_run(body, model, system)
    est = adapters.estimate_training(run)
    return TrainingRead.model_validate(
        adapters.render_training(
            est, run, model_name, spec, hardware_name, body.train_tokens, body.price_per_device_hour
        )
    )


@dataclass(frozen=True)
class PlanInputs:
    model: tuple[ModelSpec, str]
    hardware: tuple[HardwareSpec, str, roofline.System]


def read_plan(session: Session, body: TrainingPlanRequest) -> PlanInputs:
    """What the search needs from the database: the model and the profile."""
    model = catalogue.resolve_model(session, body.model)
    spec, hardware_name = catalogue.resolve_hardware(session, body)
    return PlanInputs(model, (spec, hardware_name, adapters.inference_system(spec, body, None)))


def plan_document(
    inputs: PlanInputs, body: TrainingPlanRequest, should_stop: roofline.StopCheck
) -> tuple[TrainingPlanRead, dict[str, str]]:
    """The search on the request's model and profile, its best configurations rendered, with the
    `Ridgeline-Partial` header when it stopped with configurations unfinished."""
    (model, model_name), (spec, hardware_name, system) = inputs.model, inputs.hardware
    found = adapters.plan_training(body, model, system, should_stop)
    doc = adapters.render_training_plan(body, found, model_name, spec, hardware_name)
    headers = partial_header(found.unfinished, found.searched + found.unfinished) if found.unfinished else {}
    return TrainingPlanRead.model_validate(doc), headers


def plan(
    inputs: PlanInputs, body: TrainingPlanRequest, should_stop: roofline.StopCheck
) -> tuple[bytes, dict[str, str]]:
    """The plan (`plan_document`), encoded."""
    model, headers = plan_document(inputs, body, should_stop)
    return encoding.dumps(model.model_dump(mode="json")), headers


def plan_job(session: Session, body: TrainingPlanRequest, chunks: int) -> Work:
    """The training plan as a job: the search (`adapters.plan_training`, as `plan` runs it, without a deadline: a
    cancelled job's task is stopped by the runner) in one task."""
    inputs = read_plan(session, body)
    (model, model_name), (spec, hardware_name, system) = inputs.model, inputs.hardware

    def finish(found: roofline.TrainingPlan) -> TrainingPlanRead:
        return TrainingPlanRead.model_validate(
            adapters.render_training_plan(body, found, model_name, spec, hardware_name)
        )

    return Work([Piece(adapters.plan_training, (body, model, system))], finish)
