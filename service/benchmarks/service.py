"""Rules for measured timings: idempotent uploads, each result held against its own prediction."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import math
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import TypeAdapter
from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

import adapters
from schemas.benchmarks import (
    BenchmarkResultRead,
    BenchmarkRunCreate,
    BenchmarkRunCreated,
    BenchmarkRunDetail,
    BenchmarkRunRead,
    ResultOp,
    TimingScope,
)
from schemas.common import ErrorDetail
from schemas.ops import Chain
from service import ratelimit
from service.auth import Principal
from service.benchmarks.repository import BenchmarkRepository
from service.calibrations import service as calibrations
from service.catalogue import devices
from service.catalogue import service as catalogue
from service.catalogue.service import HARDWARE
from service.errors import Conflict, NotFound, Unprocessable, validation_message
from service.orm import BenchmarkResult, BenchmarkRun, utcnow
from service.ratelimit import RateLimits
from service.results.repository import ResultRepository, RunFilters

_OPS: TypeAdapter[list[ResultOp]] = TypeAdapter(list[ResultOp])


def as_utc(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; they were stored in UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _nullable(values: NDArray[np.float64]) -> list[float | None]:
    """NaN (no prediction) is NULL."""
    out: list[float | None] = values.tolist()
    if not np.all(np.isfinite(values)):
        for i in np.flatnonzero(~np.isfinite(values)).tolist():
            out[i] = None
    return out


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def op_dtype(op: Any) -> str:
    if isinstance(op, Chain):
        return str(op.ops[0].dtype)
    return str(op.dtype)


def resolve_hardware(session: Session, hardware: str) -> tuple[str, str | None]:
    """The profile slug an upload names, and the device description when it named one instead of a slug."""
    try:
        found = devices.resolve(session, hardware)
    except NotFound as err:
        detail = [ErrorDetail(field="body.hardware", message=err.message, type="value_error")]
        raise Unprocessable(validation_message(detail), detail) from None
    return found.slug, None if found.rule == "slug" else hardware


def created(run: BenchmarkRun) -> BenchmarkRunCreated:
    return BenchmarkRunCreated(
        id=run.id,
        hardware=run.hardware,
        device=run.device,
        results=run.result_count,
        predicted=run.predicted_count,
        calibrated=run.calibrated_count,
        calibration_id=run.calibration_id,
        median_measured_over_predicted=run.median_measured_over_predicted,
        created_at=as_utc(run.created_at),
    )


def _replay(run: BenchmarkRun, digest: str, key: str) -> BenchmarkRunCreated:
    if run.request_sha256 != digest:
        raise Conflict(
            f"Idempotency-Key {key!r} was already used for a different upload (run {run.id}); "
            "send a new key for new results."
        )
    return created(run)


def _insert_run(session: Session, values: dict[str, Any]) -> int | None:
    """Insert the run row; None when a concurrent upload with the same idempotency key got there first.

    ON CONFLICT DO NOTHING (PostgreSQL and SQLite): on PostgreSQL an insert that meets an uncommitted row with the
    same key waits for that transaction, then does nothing if it committed, so the loser finds the winner's run.
    """
    dialect = session.get_bind().dialect.name
    table = BenchmarkRun.__table__
    assert isinstance(table, Table)
    stmt: Any
    if dialect == "postgresql":
        stmt = postgresql.insert(table).on_conflict_do_nothing(index_elements=["api_key_id", "idempotency_key"])
    elif dialect == "sqlite":
        stmt = sqlite.insert(table).on_conflict_do_nothing(index_elements=["api_key_id", "idempotency_key"])
    else:  # pragma: no cover - the service runs on these two
        raise RuntimeError(f"unsupported database {dialect}")
    run_id: int | None = session.execute(stmt.values(**values).returning(table.c.id)).scalar()
    return run_id


_gc_lock = threading.Lock()
_gc_holders = 0


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause CPython's cyclic garbage collector while a batch is processed. 10 000 results allocate a few hundred
    thousand container objects, which set off full collections over the whole heap (every module, numpy, pydantic,
    SQLAlchemy, matplotlib) several times per request: a large share of an upload's time (bench/ingest.py).
    Nothing here makes reference cycles worth collecting early; reference counting still frees everything. Counted,
    so concurrent uploads re-enable it only when the last one ends."""
    global _gc_holders
    with _gc_lock:
        _gc_holders += 1
        if _gc_holders == 1:
            gc.disable()
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders -= 1
            if _gc_holders == 0:
                gc.enable()


def create_run(
    session: Session,
    body: BenchmarkRunCreate,
    principal: Principal,
    idempotency_key: str | None,
    limits: RateLimits | None = None,
) -> tuple[BenchmarkRunCreated, bool]:
    """Store a run and its results in the request's transaction; returns the response and whether it is a replay
    of an earlier upload with the same Idempotency-Key. With `limits`, a new upload is charged against the key's
    rate limits (service.ratelimit); a replay is not."""
    with cyclic_gc_paused():
        return _create_run(session, body, principal, idempotency_key, limits)


def _create_run(
    session: Session,
    body: BenchmarkRunCreate,
    principal: Principal,
    idempotency_key: str | None,
    limits: RateLimits | None,
) -> tuple[BenchmarkRunCreated, bool]:
    repo = BenchmarkRepository(session)
    digest = hashlib.sha256(body.model_dump_json().encode()).hexdigest()
    if idempotency_key is not None:
        existing = repo.by_idempotency_key(principal.key_id, idempotency_key)
        if existing is not None:
            return _replay(existing, digest, idempotency_key), True

    slug, device = resolve_hardware(session, body.hardware)
    # Charged once the upload is known to be new and well-formed, before the predictions are computed.
    spent = ratelimit.charge(session, limits, principal.key_id, len(body.results)) if limits else None
    # After the charge's commit, which would release it: the profile's version, held until this run is stored (a
    # PATCH or DELETE of the profile waits), so the results are predicted with the version they name.
    version = catalogue.version_in_use(session, HARDWARE, slug)
    if version is None:  # deleted since it was resolved (the charge stands: the request was made)
        message = f"No hardware profile with slug {slug!r}: it was deleted meanwhile."
        detail = [ErrorDetail(field="body.hardware", message=message, type="value_error")]
        raise Unprocessable(validation_message(detail), detail)
    spec = catalogue.get_spec(session, HARDWARE, slug)
    ops = [r.op for r in body.results]
    preds = adapters.predict_measured(spec, slug, body.timing_scope, ops, body.host_overhead_s)
    measured = np.array([r.median_s for r in body.results])
    ratio = measured / preds.time_s  # NaN where there is no prediction

    calibrated, used = calibrations.calibrate_predictions(session, slug, ops, preds)
    predicted_count = int(np.count_nonzero(np.isfinite(preds.time_s)))
    calibrated_count = int(np.count_nonzero(np.isfinite(calibrated)))
    run_id = _insert_run(
        session,
        {
            "hardware": slug,
            "hardware_version": version,
            "device": device,
            "host": body.host,
            "software": body.software,
            "timing_scope": str(body.timing_scope),
            "host_overhead_s": body.host_overhead_s,
            "api_key_id": principal.key_id,
            "idempotency_key": idempotency_key,
            "request_sha256": digest,
            "result_count": len(ops),
            "predicted_count": predicted_count,
            "calibrated_count": calibrated_count,
            "calibration_id": int(used.max()) or None,  # the newest calibration it used
            "median_measured_over_predicted": _finite(float(np.nanmedian(ratio))) if predicted_count else None,
            "created_at": utcnow(),
        },
    )
    if run_id is None:  # lost the race to a concurrent retry of the same upload
        assert idempotency_key is not None  # only keyed inserts can conflict
        ratelimit.refund(session, spent)
        existing = repo.by_idempotency_key(principal.key_id, idempotency_key)
        if existing is None:  # pragma: no cover - the winner committed before our insert returned
            raise Conflict(f"Idempotency-Key {idempotency_key!r} is in use by a concurrent upload; retry.")
        return _replay(existing, digest, idempotency_key), True

    docs = _OPS.dump_python(ops, mode="json")
    has_calibration = np.isfinite(calibrated)
    n = len(ops)
    columns: dict[str, list[Any]] = {
        "run_id": [run_id] * n,
        "op_kind": [doc["kind"] for doc in docs],
        "dtype": [op_dtype(op) for op in ops],
        "op": docs,
        "median_s": measured.tolist(),
        "p10_s": [r.p10_s for r in body.results],
        "p90_s": [r.p90_s for r in body.results],
        "repeats": [r.repeats for r in body.results],
        "predicted_s": _nullable(preds.time_s),
        "predicted_overhead_s": _nullable(preds.overhead_s),
        "measured_over_predicted": _nullable(ratio),
        "flops": _nullable(preds.flops),
        "bytes": _nullable(preds.bytes),
        "calibrated_s": _nullable(calibrated),
        "calibration_id": [c or None for c in np.where(has_calibration, used, 0).tolist()],
    }
    ResultRepository(session).add(columns)
    run = repo.run(run_id)
    assert run is not None
    return created(run), False


def _run_read(run: BenchmarkRun, key_names: dict[int, str]) -> BenchmarkRunRead:
    return BenchmarkRunRead(
        id=run.id,
        hardware=run.hardware,
        hardware_version=run.hardware_version,
        device=run.device,
        host=run.host,
        software=run.software,
        timing_scope=TimingScope(run.timing_scope),
        host_overhead_s=run.host_overhead_s,
        results=run.result_count,
        median_measured_over_predicted=run.median_measured_over_predicted,
        api_key=key_names.get(run.api_key_id) if run.api_key_id is not None else None,
        created_at=as_utc(run.created_at),
    )


def result_read(row: BenchmarkResult) -> BenchmarkResultRead:
    flops, nbytes = row.flops, row.bytes
    return BenchmarkResultRead(
        id=row.id,
        op=row.op,
        op_kind=row.op_kind,
        dtype=row.dtype,
        median_s=row.median_s,
        p10_s=row.p10_s,
        p90_s=row.p90_s,
        repeats=row.repeats,
        predicted_s=row.predicted_s,
        measured_over_predicted=row.measured_over_predicted,
        calibrated_s=row.calibrated_s,
        calibration_id=row.calibration_id,
        measured_over_calibrated=row.median_s / row.calibrated_s if row.calibrated_s else None,
        flops=flops,
        bytes=nbytes,
        arithmetic_intensity=flops / nbytes if flops is not None and nbytes else None,
        achieved_flops_per_s=flops / row.median_s if flops is not None else None,
    )


def _shown_keys(repo: BenchmarkRepository, runs: list[BenchmarkRun], viewer: Principal | None) -> dict[int, str]:
    """The names of the uploading keys the viewer may see: its own, or all of them for an admin key; none to an
    anonymous reader."""
    ids = {r.api_key_id for r in runs if r.api_key_id is not None and viewer is not None and viewer.owns(r.api_key_id)}
    return repo.key_names(ids)


def page_runs(
    session: Session, filters: RunFilters, limit: int, offset: int, viewer: Principal | None = None
) -> tuple[list[BenchmarkRunRead], int]:
    repo = BenchmarkRepository(session)
    runs, total = repo.page_runs(filters, limit, offset)
    names = _shown_keys(repo, runs, viewer)
    return [_run_read(r, names) for r in runs], total


def get_run(
    session: Session,
    run_id: int,
    op_kind: str | None,
    dtype: str | None,
    limit: int,
    offset: int,
    viewer: Principal | None = None,
) -> BenchmarkRunDetail:
    repo = BenchmarkRepository(session)
    run = repo.run(run_id)
    if run is None:
        raise NotFound(f"No benchmark run with id {run_id}.")
    names = _shown_keys(repo, [run], viewer)
    rows, total = ResultRepository(session).page(run_id, op_kind, dtype, limit, offset)
    return BenchmarkRunDetail(
        **_run_read(run, names).model_dump(),
        items=[result_read(r) for r in rows],
        total=total,
        limit=limit,
        offset=offset,
    )
