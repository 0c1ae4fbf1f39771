"""Rules for measured load tests: the tool's file read and checked (`adapters.read_load_test`), the same deployment
and load predicted with the serving simulation at upload, both stored once per Idempotency-Key."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

import adapters
from schemas.serving import ServingRequest
from schemas.serving_benchmarks import (
    LoadTestFormat,
    ServingBenchmarkCreate,
    ServingBenchmarkRead,
    ServingErrors,
    ServingMeasured,
    ServingPredicted,
)
from service import ratelimit
from service.auth import Principal
from service.catalogue import devices
from service.catalogue import service as catalogue
from service.catalogue.service import HARDWARE
from service.errors import Conflict, NotFound, Unprocessable, details_from_validation, invalid, validation_message
from service.orm import ServingBenchmark, utcnow
from service.ratelimit import RateLimits
from service.results.serving import Filters, ServingBenchmarkRepository
from service.traces import service as traces

# The deployment's fields that a serving request has under the same names.
_DEPLOYMENT = ("model", "mode", "replicas", "parallelism", "engine", "prefill", "decode", "dtypes")


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _where(field: str) -> str:
    """A serving request's field as the upload names it: the load is the upload's own; the rest is its deployment."""
    rest = field.removeprefix("body.")
    return field if rest.startswith("load") else f"body.deployment.{rest}"


def serving_request(body: ServingBenchmarkCreate, slug: str, load: dict[str, Any]) -> ServingRequest:
    """The serving estimate's request for the upload's deployment on profile `slug` under `load`."""
    doc = body.deployment.model_dump(mode="json", include=set(_DEPLOYMENT), exclude_unset=True)
    doc |= {"model": body.deployment.model, "hardware": slug, "load": load}
    try:
        return ServingRequest.model_validate(doc)
    except ValidationError as err:
        detail = details_from_validation(list(err.errors()))
        for d in detail:
            d.field = _where(f"body.{d.field}") if d.field else "body.load"
        raise Unprocessable(validation_message(detail), detail) from None


def predict(session: Session, request: ServingRequest) -> dict[str, Any]:
    """The serving estimate of `request` (a `ServingRead` document), its errors named as the upload names them."""
    model = catalogue.resolve_model(session, request.model, "body.deployment.model")
    spec, name = catalogue.resolve_hardware(session, request, "body.deployment.hardware")
    system = adapters.inference_system(spec, request, None)
    load = request.load
    trace = None if load.trace_id is None else traces.load(session, load.trace_id, "body.load.trace_id")
    try:
        return adapters.estimate_serving(request, model, (spec, name, system), trace)
    except adapters.InvalidField as err:
        raise invalid(_where(err.field), err.message, err.kind) from None


def _predicted(doc: dict[str, Any]) -> dict[str, Any]:
    def stats(s: dict[str, Any]) -> dict[str, float]:
        return {k: s[k] for k in ("mean", "p50", "p90", "p99")}

    return {
        "requests_per_s": doc["requests_per_s"],
        "output_tokens_per_s": doc["output_tokens_per_s"],
        "ttft_s": stats(doc["ttft_s"]),
        "tpot_s": stats(doc["tpot_s"]),
        "e2e_s": stats(doc["e2e_s"]),
        "duration_s": doc["duration_s"],
    }


def to_read(row: ServingBenchmark, key_names: dict[int, str] | None = None) -> ServingBenchmarkRead:
    names = key_names or {}
    return ServingBenchmarkRead(
        id=row.id,
        format=LoadTestFormat(row.format),
        model=row.model,
        hardware=row.hardware,
        hardware_version=row.hardware_version,
        device=row.device,
        engine=row.engine,
        engine_version=row.engine_version,
        host=row.host,
        deployment=row.deployment,
        load=row.load,
        measured=ServingMeasured.model_validate(row.measured),
        predicted=ServingPredicted.model_validate(row.predicted),
        error=ServingErrors.model_validate(adapters.load_test_errors(row.measured, row.predicted)),
        api_key=names.get(row.api_key_id) if row.api_key_id is not None else None,
        created_at=_utc(row.created_at),
    )


def _replay(row: ServingBenchmark, digest: str, key: str) -> ServingBenchmarkRead:
    if row.request_sha256 != digest:
        raise Conflict(
            f"Idempotency-Key {key!r} was already used for a different upload (serving benchmark {row.id}); "
            "send a new key for a new load test."
        )
    return to_read(row)


def create(
    session: Session,
    body: ServingBenchmarkCreate,
    principal: Principal,
    idempotency_key: str | None,
    limits: RateLimits | None = None,
) -> tuple[ServingBenchmarkRead, bool]:
    """Store one load test with its prediction; returns it and whether it is a replay of an earlier upload with the
    same Idempotency-Key (nothing stored twice)."""
    repo = ServingBenchmarkRepository(session)
    digest = hashlib.sha256(body.model_dump_json().encode()).hexdigest()
    if idempotency_key is not None:
        existing = repo.by_idempotency_key(principal.key_id, idempotency_key)
        if existing is not None:
            return _replay(existing, digest, idempotency_key), True

    try:
        found = devices.resolve(session, body.deployment.hardware, "body.deployment.hardware")
    except NotFound as err:
        raise invalid("body.deployment.hardware", err.message) from None
    measured = adapters.read_load_test(str(body.format), body.result, body.entry)
    load = (
        body.load.model_dump(mode="json", exclude_unset=True) if body.load is not None else adapters.load_of(measured)
    )
    request = serving_request(body, found.slug, load)
    predicted = _predicted(predict(session, request))
    spent = ratelimit.charge(session, limits, principal.key_id, 1) if limits else None
    version = catalogue.version_in_use(session, HARDWARE, found.slug)
    if version is None:  # deleted since it was resolved
        raise invalid("body.deployment.hardware", f"No hardware profile with slug {found.slug!r}: it was deleted.")
    measured_doc = adapters.measured_doc(measured)
    errors = adapters.load_test_errors(measured_doc, predicted)
    release = body.deployment.release
    new_id = repo.insert(
        {
            "format": str(body.format),
            "model": body.deployment.model,
            "hardware": found.slug,
            "hardware_version": version,
            "device": None if found.rule == "slug" else body.deployment.hardware,
            "engine": str(release.name),
            "engine_version": release.version,
            "host": body.host,
            "deployment": body.deployment.model_dump(mode="json", exclude_unset=True) | {"hardware": found.slug},
            "load": request.load.model_dump(mode="json", exclude_unset=True),
            "measured": measured_doc,
            "predicted": predicted,
            "error_ttft": errors["ttft_s"],
            "error_tpot": errors["tpot_s"],
            "error_e2e": errors["e2e_s"],
            "error_output_tokens_per_s": errors["output_tokens_per_s"],
            "api_key_id": principal.key_id,
            "idempotency_key": idempotency_key,
            "request_sha256": digest,
            "created_at": utcnow(),
        }
    )
    if new_id is None:  # lost the race to a concurrent retry of the same upload
        assert idempotency_key is not None
        ratelimit.refund(session, spent)
        existing = repo.by_idempotency_key(principal.key_id, idempotency_key)
        if existing is None:  # pragma: no cover - the winner committed before our insert returned
            raise Conflict(f"Idempotency-Key {idempotency_key!r} is in use by a concurrent upload; retry.")
        return _replay(existing, digest, idempotency_key), True
    row = repo.get(new_id)
    assert row is not None
    return to_read(row, repo.key_names({principal.key_id})), False


def page(
    session: Session, filters: Filters, limit: int, offset: int, viewer: Principal | None
) -> tuple[list[ServingBenchmarkRead], int]:
    repo = ServingBenchmarkRepository(session)
    rows, total = repo.page(filters, limit, offset)
    ids = {r.api_key_id for r in rows if r.api_key_id is not None and viewer is not None and viewer.owns(r.api_key_id)}
    names = repo.key_names(ids)
    return [to_read(r, names) for r in rows], total


def get(session: Session, bench_id: int, viewer: Principal | None) -> ServingBenchmarkRead:
    repo = ServingBenchmarkRepository(session)
    row = repo.get(bench_id)
    if row is None:
        raise NotFound(f"No serving benchmark with id {bench_id}.")
    shown = row.api_key_id is not None and viewer is not None and viewer.owns(row.api_key_id)
    return to_read(row, repo.key_names({row.api_key_id} if shown and row.api_key_id is not None else set()))
