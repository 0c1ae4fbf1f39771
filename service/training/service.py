"""Rules for training-step estimates: which model and which profile (catalogue or inline, with the request's patch
and options); the mapping to the core and back is `adapters`' (`training_run`, `estimate_training`,
`render_training`). No formulas here."""

from __future__ import annotations

from sqlalchemy.orm import Session

import adapters
from schemas.training import TrainingRead, TrainingRequest
from service.catalogue import service as catalogue


def estimate(session: Session, body: TrainingRequest) -> TrainingRead:
    """One training step on the request's model and profile."""
    model, model_name = catalogue.resolve_model(session, body.model)
    spec, hardware_name = catalogue.resolve_hardware(session, body)
    system = adapters.inference_system(spec, body, None)
    run = adapters.training_run(body, model, system)
    est = adapters.estimate_training(run)
    return TrainingRead.model_validate(adapters.render_training(body, est, run, model_name, spec, hardware_name))
