"""Rules for calibrations: fit per op family and dtype on a random part of the results, measure on the rest, store
versioned, and stamp every stored result of the hardware with its calibrated prediction."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import TypeAdapter
from sqlalchemy.orm import Session

import adapters
from roofline.calibration import apply, fit
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


def error_stats(predicted: NDArray[np.float64], measured: NDArray[np.float64]) -> ErrorStats:
    """Median and p90 of |predicted / measured − 1| and the median signed error, over the finite pairs."""
    ok = np.isfinite(predicted) & np.isfinite(measured) & (measured > 0)
    if not np.any(ok):
        return ErrorStats(count=0, median_ape=None, p90_ape=None, bias=None)
    signed = predicted[ok] / measured[ok] - 1
    ape = np.abs(signed)
    return ErrorStats(
        count=int(ok.sum()),
        median_ape=float(np.median(ape)),
        p90_ape=float(np.percentile(ape, 90)),
        bias=float(np.median(signed)),
    )


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
    catalogue.get_spec(session, HARDWARE, body.hardware)  # 404 for an unknown profile
    repo = CalibrationRepository(session)
    families = sorted(set(body.op_families)) if body.op_families else None
    data = ResultRepository(session).columns(_filters(body), families)
    measured, physical, work = _arrays(data)
    usable = (work > 0) & (measured > 0)
    by_group: dict[str, list[int]] = {}
    for i, doc in enumerate(data.op):
        if usable[i] and doc["kind"] not in adapters.UNCALIBRATED:
            by_group.setdefault(adapters.group_of(doc), []).append(i)
    if not by_group:
        raise Unprocessable(
            f"No predicted results to calibrate on for {body.hardware!r} with these filters"
            + (f" and op families {', '.join(families)}" if families else "")
            + "; upload some with POST /v1/benchmarks."
        )

    rng = np.random.default_rng(body.seed)
    model: dict[str, Any] = {"groups": {}}
    groups: list[CalibrationGroup] = []
    held_pred: list[NDArray[np.float64]] = []
    held_raw: list[NDArray[np.float64]] = []
    held_meas: list[NDArray[np.float64]] = []
    train_ids: dict[int, int] = {}  # result id → its index among its group's training points
    for name, indices in sorted(by_group.items()):
        idx = np.asarray(indices)
        order = rng.permutation(len(idx))
        n_hold = round(len(idx) * body.holdout_fraction)
        train, hold = np.sort(idx[order[n_hold:]]), np.sort(idx[order[:n_hold]])
        keys, features, names = adapters.describe([data.op[i] for i in idx])
        known = sorted(set(keys))
        codes = adapters.variant_codes(keys, known)
        position = {int(i): p for p, i in enumerate(idx)}
        tp = np.array([position[int(i)] for i in train], dtype=np.int64)
        correction = fit(features[tp], work[train], measured[train], codes[tp], seed=body.seed)
        if correction is None:
            continue
        train_ids.update({data.id[int(i)]: k for k, i in enumerate(train)})
        hp = np.array([position[int(i)] for i in hold], dtype=np.int64)
        calibrated, how = apply(correction, features[hp], work[hold], physical[hold], codes[hp])
        held_pred.append(calibrated)
        held_raw.append(physical[hold])
        held_meas.append(measured[hold])
        family, dtype = name.split("/", 1)
        model["groups"][name] = {"correction": correction.to_json(), "variants": known, "features": names}
        groups.append(
            CalibrationGroup(
                family=family,
                dtype=dtype,
                train=len(train),
                holdout=len(hold),
                before=error_stats(physical[hold], measured[hold]),
                after=error_stats(calibrated, measured[hold]),
                methods={label: int(np.count_nonzero(how == m)) for m, label in adapters.METHODS.items()},
                launch_s=correction.launch_s,
                floor_s=correction.floor_s,
                utilisation=list(correction.coef),
                centre=correction.center,
                work_range_s=[10 ** correction.work_range[0], 10 ** correction.work_range[1]],
            )
        )
    if not groups:
        raise Unprocessable(
            "Too few results to fit anything (at least 8 per op family and dtype in the training part)."
        )
    summary = {
        "groups": [g.model_dump(mode="json") for g in groups],
        "before": error_stats(np.concatenate(held_raw), np.concatenate(held_meas)).model_dump(),
        "after": error_stats(np.concatenate(held_pred), np.concatenate(held_meas)).model_dump(),
    }
    row = Calibration(
        hardware=body.hardware,
        version=repo.next_version(body.hardware),
        op_families=sorted({adapters.op_kind(g.family) for g in groups}),
        request=body.model_dump(mode="json"),
        summary=summary,
        model=model,
        created_at=utcnow(),
    )
    repo.add(row)
    _stamp(session, row, train_ids)
    return to_read(row)


def _stamp(session: Session, calibration: Calibration, train_ids: dict[int, int]) -> None:
    """Give every stored result of the hardware in the covered groups its calibrated prediction; a result the
    calibration was trained on gets its leave-one-out value, not its own measurement back."""
    results = ResultRepository(session)
    everything = results.columns(RunFilters(hardware=calibration.hardware), sorted(calibration.op_families))
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
    return adapters.Chosen(choice, [fitted(row)])


def for_runs(session: Session, hardware: str | None, choice: str | int, where: str) -> adapters.CalibrationUse | None:
    """What `options.calibration` = `choice` means for the inference runs on a profile (`hardware`: its slug; None
    for an inline or patched one); None for "none". Errors name `where` (404 unknown id, 422 another profile's id)."""
    if choice == "none":
        return None
    return adapters.CalibrationUse.of(choose(session, hardware, choice, where))


def calibrate_predictions(
    session: Session, hardware: str, ops: list[Any], preds: adapters.Predictions
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Calibrated predictions for incoming results (per op family, the newest calibration of their hardware that
    covers it): seconds per op (NaN where no calibration covers it) and the calibration id used (0: none)."""
    recent = CalibrationRepository(session).recent(hardware)
    if not recent:
        return np.full(len(ops), np.nan), np.zeros(len(ops), dtype=np.int64)
    docs = _OPS.dump_python(ops, mode="json")
    calibrations = [fitted(row) for row in recent]
    calibrated, _, used = adapters.calibrate_docs(calibrations, docs, preds.time_s - preds.overhead_s, preds.time_s)
    return calibrated, used
