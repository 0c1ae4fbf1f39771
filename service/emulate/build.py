"""A deployment description (the body of `POST /v1/estimate/serving` without its load) as the emulated engine's
engines, read from the built-in catalogue: no database and no service needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import adapters
from hardware_db import load_hardware, load_models
from schemas.serving import ServingRequest
from service.emulate.app import Emulated

# The load is the emulated engine's clients; a placeholder lets the deployment validate as a serving request.
_PLACEHOLDER_LOAD = {"concurrency": 1, "prompt_tokens": {"value": 1}, "output_tokens": {"value": 1}}


class DeploymentError(ValueError):
    pass


def deployment_doc(path: str | None, model: str | None, hardware: str | None) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if path:
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise DeploymentError(f"{path}: {err}") from None
        if not isinstance(doc, dict):
            raise DeploymentError(f"{path}: a JSON object (a serving estimate's body without its load)")
    if model:
        doc["model"] = model
    if hardware:
        doc["hardware"] = hardware
    return doc


def emulated(doc: dict[str, Any], longest: int, default_output_tokens: int, name: str | None = None) -> Emulated:
    """The engines `doc` describes, serving requests of up to `longest` tokens."""
    doc = {k: v for k, v in doc.items() if k not in ("release", "load")}
    try:
        request = ServingRequest.model_validate(doc | {"load": _PLACEHOLDER_LOAD})
    except ValidationError as err:
        first = err.errors()[0]
        raise DeploymentError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    if not isinstance(request.model, str) or not isinstance(request.hardware, str):
        raise DeploymentError("model and hardware: catalogue slugs")
    models = {m.slug: m for m in load_models()}
    profiles = {h.slug: h for h in load_hardware()}
    if request.model not in models:
        raise DeploymentError(f"model {request.model!r} is not in the catalogue ({', '.join(sorted(models))})")
    if request.hardware not in profiles:
        raise DeploymentError(f"hardware {request.hardware!r} is not in the catalogue ({', '.join(sorted(profiles))})")
    spec = profiles[request.hardware]
    system = adapters.inference_system(spec, request, None)
    model = models[request.model]

    def make() -> Any:
        try:
            return adapters.live_serving(request, model, system, longest)
        except adapters.InvalidField as err:
            raise DeploymentError(f"{err.field.removeprefix('body.')}: {err.message}") from None

    make()  # refuse a deployment that does not fit before serving it
    description = request.model_dump(mode="json", exclude={"load", "objectives", "series"}, exclude_unset=True)
    return Emulated(make, name or request.model, description, default_output_tokens)
