"""Rules for serving estimates: the model and profile resolved as for inference runs (no calibration: the simulator
costs iterations with the shipped model), then the simulation. The mapping to the core and back is `adapters`'."""

from __future__ import annotations

from sqlalchemy.orm import Session

import adapters
from schemas.serving import ServingRead, ServingRequest
from service.catalogue import service as catalogue


def estimate(session: Session, body: ServingRequest) -> ServingRead:
    model = catalogue.resolve_model(session, body.model)
    spec, name = catalogue.resolve_hardware(session, body)
    system = adapters.inference_system(spec, body, None)
    return ServingRead.model_validate(adapters.estimate_serving(body, model, (spec, name, system)))
