"""Rules for calibrations: fit per op family and dtype on a random part of the results, measure on the rest, store
versioned, and stamp every stored result of the hardware with its calibrated prediction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy.orm import Session

from roofline.calibration import Correction, Method, apply, fit
from schemas.calibrations import CalibrationCreate, CalibrationGroup, CalibrationRead, ErrorStats
from schemas.common import ErrorDetail
from service.benchmarks.repository import RunFilters
from service.calibrations.features import UNCALIBRATED, describe, group_of, op_kind, variant_codes
from service.calibrations.repository import CalibrationRepository, ResultColumns
from service.catalogue import service as catalogue
from service.catalogue.service import HARDWARE
from service.errors import NotFound, Unprocessable
from service.orm import Calibration, utcnow

METHODS = {Method.interpolated: "interpolated", Method.fitted: "fitted", Method.physical: "physical"}


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


@dataclass(frozen=True)
class FittedGroup:
    correction: Correction
    variants: list[str]  # variant keys, by code


_CACHE: dict[tuple[int, str, int, str], dict[str, FittedGroup]] = {}
_CACHE_SIZE = 32


def fitted(calibration: Calibration) -> dict[str, FittedGroup]:
    """The calibration's corrections, parsed once per process (calibrations never change once stored). The key
    carries the creation time too, so that two databases served by one process cannot share an entry."""
    key = (calibration.id, calibration.hardware, calibration.version, calibration.created_at.isoformat())
    groups = _CACHE.get(key)
    if groups is None:
        groups = {
            name: FittedGroup(Correction.from_json(doc["correction"]), list(doc["variants"]))
            for name, doc in calibration.model["groups"].items()
        }
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = groups
    return groups


def calibrate(
    calibration: Calibration,
    docs: list[dict[str, Any]],
    work_s: NDArray[np.float64],
    physical_s: NDArray[np.float64],
    own: dict[int, int] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Calibrated seconds and `Method` for ops (JSON documents) with their modelled work and time; NaN and
    physical for ops whose family and dtype the calibration does not cover. `own` maps an op's position to its
    index among the training points of its group, to leave it out of its own neighbours."""
    out, method, _ = calibrate_with([calibration], docs, work_s, physical_s, own)
    return out, method


def calibrate_with(
    calibrations: list[Calibration],
    docs: list[dict[str, Any]],
    work_s: NDArray[np.float64],
    physical_s: NDArray[np.float64],
    own: dict[int, int] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
    """`calibrate` with several calibrations in order of preference (newest first): each op family and dtype gets
    the first one that covers it. Also returns the id used per op (0: none)."""
    out = np.full(len(docs), np.nan)
    method = np.full(len(docs), int(Method.physical), dtype=np.int64)
    used = np.zeros(len(docs), dtype=np.int64)
    by_group: dict[str, list[int]] = {}
    for i, doc in enumerate(docs):
        if doc["kind"] not in UNCALIBRATED and np.isfinite(physical_s[i]):
            by_group.setdefault(group_of(doc), []).append(i)
    for name, indices in by_group.items():
        found = covering(calibrations, name)
        if found is None:
            continue
        keys, features, _ = describe([docs[i] for i in indices])
        idx = np.asarray(indices)
        own_idx = None if own is None else np.array([own.get(i, -1) for i in indices], dtype=np.int64)
        values, how = correct(found[1], keys, features, work_s[idx], physical_s[idx], own_idx)
        out[idx], method[idx], used[idx] = values, how, found[0].id
    return out, method, used


def covering(calibrations: list[Calibration], group: str) -> tuple[Calibration, FittedGroup] | None:
    """The first calibration (newest first) with a fitted correction for `family/dtype`, and that correction."""
    return next(((c, fitted(c)[group]) for c in calibrations if group in fitted(c)), None)


def correct(
    group: FittedGroup,
    keys: list[str] | str,
    features: NDArray[np.float64],
    work_s: NDArray[np.float64],
    physical_s: NDArray[np.float64],
    own: NDArray[np.int64] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Calibrated seconds and `Method` for ops of one group (variant keys and features from `features.describe` or
    `features.describe_sized`): the one place a fitted correction meets ops, for op estimates, stored results and
    inference runs alike (`roofline.calibration.apply`). One key stands for every op."""
    if isinstance(keys, str):
        known = group.variants.index(keys) if keys in group.variants else -1
        codes = np.full(len(work_s), known, dtype=np.int64)
    else:
        codes = variant_codes(keys, group.variants)
    return apply(group.correction, features, work_s, physical_s, codes, own)


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
    data = repo.results(_filters(body), families)
    measured, physical, work = _arrays(data)
    usable = (work > 0) & (measured > 0)
    by_group: dict[str, list[int]] = {}
    for i, doc in enumerate(data.op):
        if usable[i] and doc["kind"] not in UNCALIBRATED:
            by_group.setdefault(group_of(doc), []).append(i)
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
        keys, features, names = describe([data.op[i] for i in idx])
        known = sorted(set(keys))
        codes = variant_codes(keys, known)
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
                methods={label: int(np.count_nonzero(how == m)) for m, label in METHODS.items()},
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
        op_families=sorted({op_kind(g.family) for g in groups}),
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
    repo = CalibrationRepository(session)
    everything = repo.results(RunFilters(hardware=calibration.hardware), sorted(calibration.op_families))
    _, physical, work = _arrays(everything)
    own = {p: train_ids[rid] for p, rid in enumerate(everything.id) if rid in train_ids}
    calibrated, _ = calibrate(calibration, everything.op, work, physical, own)
    repo.stamp(
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


NOTES = {
    "interpolated": "interpolated between measured neighbours",
    "fitted": "the fitted size-dependent correction only: no measured neighbour close enough",
    "physical": "the physical model: outside the measured range or op family not calibrated",
}


def choose(
    session: Session, hardware: str | None, choice: str | int, field: str = "body.options.calibration"
) -> tuple[list[Calibration], dict[str, Any] | None]:
    """The calibrations `options.calibration` names for a profile (`hardware`: its catalogue slug, None for an inline
    or patched profile), newest first. "latest" on a profile with none is no error: it returns no calibrations and
    the note that says the physical model stands. An unknown id is a 404 and another profile's id a 422, both
    naming `field`."""
    repo = CalibrationRepository(session)
    if choice == "latest":
        rows = repo.recent(hardware) if hardware else []
        if not rows:
            why = f"no calibration for {hardware!r}" if hardware else "an inline or patched profile has no calibrations"
            return [], {"requested": "latest", "method": "physical", "note": f"{why}: the physical model"}
        return rows, None
    row = repo.get(int(choice))
    if row is None:
        message = f"No calibration with id {choice}."
        raise NotFound(message, [ErrorDetail(field=field, message=message, type="not_found")])
    if hardware is not None and row.hardware != hardware:
        message = f"Calibration {row.id} is for {row.hardware!r}, not {hardware!r}."
        raise Unprocessable(message, [ErrorDetail(field=field, message=message, type="value_error")])
    return [row], None


def for_estimate(
    session: Session, hardware: str | None, choice: str | int, docs: list[dict[str, Any]], time_s: Any, overhead_s: Any
) -> tuple[NDArray[np.float64] | None, dict[str, Any], list[dict[str, Any]]]:
    """Calibrated times for estimated ops (JSON documents, with the model's time and fixed cost); what the
    response's `assumptions.calibration` says for all of them together, and for each one. Times are None when
    nothing applies (the physical model stands, and the note says why). `choice` is "latest" or a calibration id;
    `hardware` is the catalogue slug (None for an inline or patched profile)."""
    rows, none = choose(session, hardware, choice)
    if none is not None:
        return None, none, [none] * len(docs)
    physical = np.atleast_1d(np.asarray(time_s, dtype=np.float64))
    work = physical - np.broadcast_to(np.asarray(overhead_s, dtype=np.float64), physical.shape)
    calibrated, how, used = calibrate_with(rows, docs, work, physical)
    result = np.where(np.isfinite(calibrated), calibrated, physical)
    by_id = {row.id: row for row in rows}
    cache: dict[tuple[int, str], dict[str, Any]] = {}
    each = []
    for cid, m in zip(used.tolist(), how.tolist(), strict=True):
        label = METHODS[Method(m)]
        if (cid, label) not in cache:
            row = by_id.get(cid, rows[0])  # an op no calibration covers names the newest one asked about
            cache[(cid, label)] = {
                "id": row.id, "version": row.version, "hardware": row.hardware, "method": label, "note": NOTES[label],
            }  # fmt: skip
        each.append(cache[(cid, label)])
    distinct = {(e["id"], e["method"]) for e in each}
    if len(distinct) == 1:
        info = each[0]
    else:
        counts: dict[str, int] = {}
        for e in each:
            counts[e["method"]] = counts.get(e["method"], 0) + 1
        info = {"ids": sorted({e["id"] for e in each}), "method": counts, "note": "per point: see each item"}
    return result, info, each


def calibrate_items(
    session: Session, hardware: str | None, choice: str | int, docs: list[dict[str, Any]], items: list[dict[str, Any]]
) -> None:
    """Apply a calibration to rendered estimate items (dicts with EstimateRead's fields), in place."""
    times = np.array([item["time_s"] for item in items], dtype=np.float64)
    overheads = np.array([item["overhead_s"] for item in items], dtype=np.float64)
    calibrated, _, each = for_estimate(session, hardware, choice, docs, times, overheads)
    values = times.tolist() if calibrated is None else calibrated.tolist()
    for item, value, raw, info in zip(items, values, times.tolist(), each, strict=True):
        item["details"] = {**item["details"], "raw_time_s": raw}
        item["assumptions"] = {**item["assumptions"], "calibration": info}
        item["time_s"] = value
        item["achieved_flops_per_s"] = item["flops"] / value if value > 0 else 0.0
