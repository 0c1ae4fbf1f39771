"""Rules for training-step estimates and plans: which model and which profile (catalogue or inline, with the
request's patch and options); the mapping to the core and back is `adapters`' (`training_run`, `estimate_training`,
`render_training`, `plan_training`, `render_training_plan`). No formulas here."""

from __future__ import annotations

from sqlalchemy.orm import Session

import adapters
import roofline
from schemas.training import TrainingRead, TrainingRequest
from schemas.training_plan import TrainingPlanRead, TrainingPlanRequest
from service.catalogue import service as catalogue
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


def plan(session: Session, body: TrainingPlanRequest) -> TrainingPlanRead:
    """The search on the request's model and profile, its best configurations rendered."""
    model, model_name = catalogue.resolve_model(session, body.model)
    spec, hardware_name = catalogue.resolve_hardware(session, body)
    system = adapters.inference_system(spec, body, None)
    found = adapters.plan_training(body, model, system)
    return TrainingPlanRead.model_validate(adapters.render_training_plan(body, found, model_name, spec, hardware_name))


def plan_job(session: Session, body: TrainingPlanRequest, chunks: int) -> Work:
    """The training plan as a job: the search (`adapters.plan_training`, as `plan` runs it) in one task."""
    model, model_name = catalogue.resolve_model(session, body.model)
    spec, hardware_name = catalogue.resolve_hardware(session, body)
    system = adapters.inference_system(spec, body, None)

    def finish(found: roofline.TrainingPlan) -> TrainingPlanRead:
        return TrainingPlanRead.model_validate(
            adapters.render_training_plan(body, found, model_name, spec, hardware_name)
        )

    return Work([Piece(adapters.plan_training, (body, model, system))], finish)
