"""Rules for calibrations: which stored results a calibration is fitted on (the fit itself, per op family and dtype on
a random part of them and measured on the rest, is `adapters.fit_calibration`), stored versioned, and every stored
result of the hardware stamped with its calibrated prediction."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import TypeAdapter
from sqlalchemy.orm import Session

import adapters
from schemas.benchmarks import ResultOp
from schemas.calibrations import CalibrationCreate, CalibrationGroup, CalibrationRead, ErrorStats
from schemas.common import ErrorDetail
from service.calibrations.repository import CalibrationRepository
from service.catalogue import service as catalogue
from service.catalogue.service import HARDWARE
from service.errors import NotFound, Unprocessable
from service.orm import Calibration, utcnow
from service.results.repository import ResultColumns, ResultRepository, RunFilters

_OPS: TypeAdapter[list[ResultOp]] = TypeAdapter(list[ResultOp])


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else as_utc(value)


def as_utc(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; they were stored in UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


_CACHE: dict[tuple[int, str, int, str], adapters.Fitted] = {}
_CACHE_SIZE = 32


def fitted(calibration: Calibration) -> adapters.Fitted:
    """The calibration's corrections, parsed once per process (calibrations never change once stored). The key
    carries the creation time too, so that two databases served by one process cannot share an entry."""
    key = (calibration.id, calibration.hardware, calibration.version, calibration.created_at.isoformat())
    parsed = _CACHE.get(key)
    if parsed is None:
        parsed = adapters.Fitted.parse(calibration.id, calibration.version, calibration.hardware, calibration.model)
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = parsed
    return parsed


def _filters(body: CalibrationCreate) -> RunFilters:
    name, _, version = (body.software or "").partition("=")
    return RunFilters(
        hardware=body.hardware,
        dtype=body.dtype.value if body.dtype else None,
        software=name or None,
        software_version=version or None,
        timing_scope=body.timing_scope.value if body.timing_scope else None,
        since=_utc(body.since),
        until=_utc(body.until),
    )


def _arrays(data: ResultColumns) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    measured = np.asarray(data.median_s, dtype=np.float64)
    physical = np.asarray(data.predicted_s, dtype=np.float64)
    overhead = np.asarray([v if v is not None else 0.0 for v in data.predicted_overhead_s], dtype=np.float64)
    return measured, physical, physical - overhead


def create(session: Session, body: CalibrationCreate) -> CalibrationRead:
    """Fit on the results predicted with the profile's current version: the calibration corrects that version's
    predictions, so results predicted with other figures have no say (and keep their own calibrated values)."""
    version = catalogue.version_in_use(session, HARDWARE, body.hardware)
    if version is None:
        raise NotFound(f"No hardware profile with slug {body.hardware!r}.")
    repo = CalibrationRepository(session)
    families = sorted(set(body.op_families)) if body.op_families else None
    filters = replace(_filters(body), hardware_version=version)
    data = ResultRepository(session).columns(filters, families)
    measured, physical, work = _arrays(data)
    by_group = adapters.calibration_groups(data.op, measured, work)
    if not by_group:
        raise Unprocessable(
            f"No predicted results to calibrate on for {body.hardware!r} (version {version}) with these filters"
            + (f" and op families {', '.join(families)}" if families else "")
            + "; upload some with POST /v1/benchmarks."
        )
    result = adapters.fit_calibration(
        by_group, data.op, measured, physical, work, seed=body.seed, holdout_fraction=body.holdout_fraction
    )
    if result is None:
        raise Unprocessable(
            "Too few results to fit anything (at least 8 per op family and dtype in the training part)."
        )
    summary = {
        "groups": [g.model_dump(mode="json") for g in result.groups],
        "before": result.before.model_dump(),
        "after": result.after.model_dump(),
    }
    row = Calibration(
        hardware=body.hardware,
        version=repo.next_version(body.hardware),
        hardware_version=version,
        op_families=sorted({adapters.op_kind(g.family) for g in result.groups}),
        request=body.model_dump(mode="json"),
        summary=summary,
        model=result.model,
        created_at=utcnow(),
    )
    repo.add(row)
    _stamp(session, row, {data.id[i]: k for i, k in result.trained.items()})
    return to_read(row)


def _stamp(session: Session, calibration: Calibration, train_ids: dict[int, int]) -> None:
    """Give every stored result of the hardware in the covered groups its calibrated prediction; a result the
    calibration was trained on gets its leave-one-out value, not its own measurement back."""
    results = ResultRepository(session)
    everything = results.columns(
        RunFilters(hardware=calibration.hardware, hardware_version=calibration.hardware_version),
        sorted(calibration.op_families),
    )
    _, physical, work = _arrays(everything)
    own = {p: train_ids[rid] for p, rid in enumerate(everything.id) if rid in train_ids}
    calibrated, _, _ = adapters.calibrate_docs([fitted(calibration)], everything.op, work, physical, own)
    results.stamp(
        [
            {"id": rid, "calibrated_s": value, "calibration_id": calibration.id}
            for rid, value in zip(everything.id, calibrated.tolist(), strict=True)
            if np.isfinite(value)
        ]
    )


def to_read(row: Calibration) -> CalibrationRead:
    return CalibrationRead(
        id=row.id,
        hardware=row.hardware,
        version=row.version,
        hardware_version=row.hardware_version,
        op_families=row.op_families,
        request=row.request,
        groups=[CalibrationGroup.model_validate(g) for g in row.summary["groups"]],
        before=ErrorStats.model_validate(row.summary["before"]),
        after=ErrorStats.model_validate(row.summary["after"]),
        created_at=as_utc(row.created_at),
    )


def get(session: Session, calibration_id: int) -> CalibrationRead:
    row = CalibrationRepository(session).get(calibration_id)
    if row is None:
        raise NotFound(f"No calibration with id {calibration_id}.")
    return to_read(row)


def page(session: Session, hardware: str | None, limit: int, offset: int) -> tuple[list[CalibrationRead], int]:
    rows, total = CalibrationRepository(session).page(hardware, limit, offset)
    return [to_read(r) for r in rows], total


def choose(
    session: Session, hardware: str | None, choice: str | int, field: str = "body.options.calibration"
) -> adapters.Chosen:
    """The calibrations `options.calibration` names for a profile (`hardware`: its catalogue slug, None for an inline
    or patched profile), newest first. "latest" on a profile with none is no error: it chooses no calibrations, with
    the note that says the physical model stands. An unknown id is a 404 and another profile's id a 422, both naming
    `field`."""
    repo = CalibrationRepository(session)
    if choice == "latest":
        rows = repo.recent(hardware) if hardware else []
        if not rows:
            why = f"no calibration for {hardware!r}" if hardware else "an inline or patched profile has no calibrations"
            return adapters.Chosen(
                choice, [], {"requested": "latest", "method": "physical", "note": f"{why}: the physical model"}
            )
        return adapters.Chosen(choice, [fitted(row) for row in rows])
    row = repo.get(int(choice))
    if row is None:
        message = f"No calibration with id {choice}."
        raise NotFound(message, [ErrorDetail(field=field, message=message, type="not_found")])
    if hardware is not None and row.hardware != hardware:
        message = f"Calibration {row.id} is for {row.hardware!r}, not {hardware!r}."
        raise Unprocessable(message, [ErrorDetail(field=field, message=message, type="value_error")])
    if hardware is not None:
        current = catalogue.current_version(session, HARDWARE, hardware)
        if current is not None and current != row.hardware_version:
            message = (
                f"Calibration {row.id} was fitted on version {row.hardware_version} of {hardware!r}, which is now at "
                f"version {current}: fit a new one."
            )
            raise Unprocessable(message, [ErrorDetail(field=field, message=message, type="value_error")])
    return adapters.Chosen(choice, [fitted(row)])


def for_runs(session: Session, hardware: str | None, choice: str | int, where: str) -> adapters.CalibrationUse | None:
    """What `options.calibration` = `choice` means for the inference runs on a profile (`hardware`: its slug; None
    for an inline or patched one); None for "none". Errors name `where` (404 unknown id, 422 another profile's id)."""
    if choice == "none":
        return None
    return adapters.CalibrationUse.of(choose(session, hardware, choice, where))


def count(session: Session, hardware: str) -> int:
    """Calibrations fitted on profile `hardware` (which refer to it)."""
    return CalibrationRepository(session).count(hardware)


def calibrate_predictions(
    session: Session, hardware: str, ops: list[Any], preds: adapters.Predictions
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Calibrated predictions for incoming results (per op family, the newest calibration of their hardware's current
    version that covers it): seconds per op (NaN where no calibration covers it) and the calibration id used (0:
    none)."""
    recent = CalibrationRepository(session).recent(hardware)
    if not recent:
        return np.full(len(ops), np.nan), np.zeros(len(ops), dtype=np.int64)
    docs = _OPS.dump_python(ops, mode="json")
    calibrations = [fitted(row) for row in recent]
    calibrated, _, used = adapters.calibrate_docs(calibrations, docs, preds.time_s - preds.overhead_s, preds.time_s)
    return calibrated, used
