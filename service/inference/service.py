"""Rules for inference estimates: which model, which profile and which calibration, resolved once per distinct
reference of a request; a batch's requests and a sweep's grid. The mapping to the core and back is `adapters`'
(`prepare_run`, `estimate_runs`, `render_run`). No formulas here."""

from __future__ import annotations

import itertools
import json
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

import adapters
import roofline
from schemas.common import ErrorDetail
from schemas.estimates import EstimateContext
from schemas.hardware import HardwareSpec
from schemas.inference import InferenceBatchRead, InferenceBatchRequest, InferenceRead, InferenceRequest
from schemas.models import ModelSpec
from service import encoding
from service.calibrations import service as calibrations
from service.catalogue import service as catalogue
from service.catalogue.loopread import DigestReader, LoopReads
from service.errors import Unprocessable, details_from_validation, validation_message


class Resolver:
    """Resolves models and hardware once per distinct reference within one request (a batch repeats them).

    Without a session (`on_loop`) it holds only what was resolved before it was made: the event loop's path."""

    def __init__(self, session: Session | None) -> None:
        self.session = session
        self.models: dict[str, tuple[ModelSpec, str]] = {}
        self.hardware: dict[str, tuple[HardwareSpec, str, roofline.System, adapters.CalibrationUse | None]] = {}

    @staticmethod
    def _model_key(ref: Any) -> str:
        return ref if isinstance(ref, str) else json.dumps(ref.model_dump(mode="json"), sort_keys=True)

    @staticmethod
    def _system_key(body: EstimateContext) -> str:
        return json.dumps(
            body.model_dump(mode="json", include={"hardware", "hardware_patch", "options"}), sort_keys=True
        )

    def model(self, ref: Any, where: str = "body") -> tuple[ModelSpec, str]:
        key = self._model_key(ref)
        if key not in self.models:
            assert self.session is not None, "a resolver without a session holds what it was given"
            self.models[key] = catalogue.resolve_model(self.session, ref, f"{where}.model")
        return self.models[key]

    def system(
        self, body: EstimateContext, where: str = "body"
    ) -> tuple[HardwareSpec, str, roofline.System, adapters.CalibrationUse | None]:
        """The profile, its name, the core's system (with the calibration's corrector) and the calibration use."""
        key = self._system_key(body)
        if key not in self.hardware:
            assert self.session is not None, "a resolver without a session holds what it was given"
            spec, name = catalogue.resolve_hardware(self.session, body, f"{where}.hardware")
            slug = catalogue.calibration_slug(body)
            use = calibrations.for_runs(self.session, slug, body.options.calibration, f"{where}.options.calibration")
            self.hardware[key] = self._built(spec, name, body, use)
        return self.hardware[key]

    @staticmethod
    def _built(
        spec: HardwareSpec, name: str, body: EstimateContext, use: adapters.CalibrationUse | None
    ) -> tuple[HardwareSpec, str, roofline.System, adapters.CalibrationUse | None]:
        return spec, name, adapters.inference_system(spec, body, use), use

    @classmethod
    async def on_loop(cls, reader: DigestReader, body: InferenceRequest) -> Resolver | None:
        """A resolver for one request whose model and profile one digest read each settles on the event loop, without
        a calibration (`service.estimates.service.estimate_op` says why); None: resolve through a session."""
        if body.options.calibration != "none":
            return None
        model = await catalogue.resolve_model_on_loop(reader, body.model)
        hardware = await catalogue.resolve_hardware_on_loop(reader, body) if model is not None else None
        if model is None or hardware is None:
            return None
        resolver = cls(None)
        resolver.models[cls._model_key(body.model)] = model
        resolver.hardware[cls._system_key(body)] = cls._built(*hardware, body, None)
        return resolver


def prepare(resolver: Resolver, body: InferenceRequest, where: str = "body") -> adapters.Prepared:
    """A request as a core run, its model and profile resolved by `resolver`."""
    return adapters.prepare_run(body, resolver.model(body.model, where), resolver.system(body, where), where)


# The op endpoint's hot path (`service.estimates.service.estimate_op` says why): on the event loop when one digest
# read each settles the model and the profile and no calibration is asked for (one run is bounded work: the limits
# bound the decode steps, sampled), else one trip through the thread pool. The model built here is encoded where it
# was built, not validated a second time by FastAPI (tests/service/test_encoding.py checks the body).
async def estimate_inference(reads: LoopReads, body: InferenceRequest) -> bytes:
    """One run, as the JSON of an `InferenceRead`."""
    resolver = await Resolver.on_loop(reads.digests, body)
    if resolver is not None:
        return encoding.dumps(estimate(resolver, body).model_dump(mode="json"))

    def work(session: Session) -> bytes:
        return encoding.dumps(estimate(session, body).model_dump(mode="json"))

    return await reads.in_session(work)


def estimate(source: Session | Resolver, body: InferenceRequest) -> InferenceRead:
    """One run, resolved through a session, or by a resolver that already holds its model and profile."""
    resolver = source if isinstance(source, Resolver) else Resolver(source)
    prepared = prepare(resolver, body)
    return InferenceRead.model_validate(adapters.render_run(prepared, adapters.estimate_runs([prepared])[0]))


def _sweep_items(body: InferenceBatchRequest) -> tuple[list[tuple[InferenceRequest, str]], dict[str, list[Any]]]:
    """The requests of a sweep's grid (first path varies slowest), each with where its errors point."""
    assert body.sweep is not None
    base = body.sweep.base.model_dump(mode="json", exclude_unset=True)
    paths = list(body.sweep.vary)
    grid: dict[str, list[Any]] = {path: [] for path in paths}
    items = []
    for values in itertools.product(*(body.sweep.vary[path] for path in paths)):
        doc = json.loads(json.dumps(base))
        for path, value in zip(paths, values, strict=True):
            grid[path].append(value)
            *parents, leaf = path.split(".")
            node = doc
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        try:
            items.append((InferenceRequest.model_validate(doc), "body.sweep.base"))
        except ValidationError as err:
            detail = []
            for d in details_from_validation(list(err.errors())):
                field = d.field or ""
                varied = next((p for p in paths if field == p or field.startswith(p + ".")), None)
                where = f"body.sweep.vary.{varied}" if varied else f"body.sweep.base.{field}"
                point = ", ".join(f"{p}={v}" for p, v in zip(paths, values, strict=True))
                detail.append(ErrorDetail(field=where, message=f"{d.message} ({point})", type=d.type))
            raise Unprocessable(validation_message(detail), detail) from None
    return items, grid


def estimate_batch(session: Session, body: InferenceBatchRequest) -> InferenceBatchRead:
    """Many runs at once (a list, or a sweep's grid), their ops evaluated together."""
    resolver = Resolver(session)
    grid = None
    if body.items is not None:
        requests = [(item, f"body.items.{i}") for i, item in enumerate(body.items)]
    else:
        requests, grid = _sweep_items(body)
    prepared = [prepare(resolver, item, where) for item, where in requests]
    estimates = adapters.estimate_runs(prepared)
    return InferenceBatchRead.model_validate(
        {"items": [adapters.render_run(p, e) for p, e in zip(prepared, estimates, strict=True)], "grid": grid}
    )
