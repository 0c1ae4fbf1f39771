"""Rules for serving calibrations: fitted on the measured load tests of a hardware profile (and engine and model,
where given), each stored with its held-out error; chosen by `options.calibration` in /v1/estimate/serving."""

from __future__ import annotations

from datetime import UTC

import numpy as np
from sqlalchemy.orm import Session

import adapters
from schemas.calibrations import CalibrationCreate, ErrorStats, ServingCalibrationRead
from service.errors import NotFound, invalid
from service.orm import ServingCalibration, utcnow
from service.results.serving import Filters, ServingBenchmarkRepository, ServingCalibrationRepository

MIN_LOAD_TESTS = 2  # one to fit, one held out


def read(row: ServingCalibration) -> ServingCalibrationRead:
    created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
    return ServingCalibrationRead(
        id=row.id,
        hardware=row.hardware,
        engine=row.engine,
        model=row.model,
        load_tests=row.points,
        parameters=row.parameters,
        before={k: ErrorStats.model_validate(v) for k, v in row.errors["before"].items()},
        after={k: ErrorStats.model_validate(v) for k, v in row.errors["after"].items()},
        created_at=created,
    )


def create(session: Session, body: CalibrationCreate) -> ServingCalibrationRead:
    rows = ServingBenchmarkRepository(session).all(
        Filters(hardware=body.hardware, model=body.model, engine=body.engine)
    )
    pairs = [
        (r.predicted["ttft_s"]["mean"], r.measured["ttft_s"]["mean"], r.predicted["tpot_s"]["mean"],
         r.measured["tpot_s"]["mean"])
        for r in rows
        if r.measured.get("ttft_s") and r.measured.get("tpot_s")
    ]  # fmt: skip
    points = np.array(pairs, dtype=np.float64).reshape(-1, 4)
    points = points[np.all(np.isfinite(points) & (points > 0), axis=1)]
    if len(points) < MIN_LOAD_TESTS:
        where = "engine" if body.engine else "model" if body.model else "hardware"
        raise invalid(
            f"body.{where}",
            f"{len(points)} load tests with TTFT and TPOT measured match; a serving calibration needs at least "
            f"{MIN_LOAD_TESTS} (POST /v1/serving-benchmarks)",
        )
    ttft_p, ttft_m, tpot_p, tpot_m = points.T
    fit = adapters.fit_serving(ttft_p, ttft_m, tpot_p, tpot_m)
    row = ServingCalibration(
        hardware=body.hardware,
        engine=body.engine,
        model=body.model,
        points=len(points),
        parameters={k: float(v) for k, v in fit.__dict__.items()},
        errors=adapters.held_out(ttft_p, ttft_m, tpot_p, tpot_m),
        created_at=utcnow(),
    )
    return read(ServingCalibrationRepository(session).add(row))


def get(session: Session, calibration_id: int) -> ServingCalibrationRead:
    row = ServingCalibrationRepository(session).get(calibration_id)
    if row is None:
        raise NotFound(f"No serving calibration with id {calibration_id}.")
    return read(row)


def page(session: Session, hardware: str | None, limit: int, offset: int) -> tuple[list[ServingCalibrationRead], int]:
    rows, total = ServingCalibrationRepository(session).page(hardware, limit, offset)
    return [read(r) for r in rows], total


def choose(
    session: Session, hardware: str | None, choice: str | int, field: str = "body.options.calibration"
) -> tuple[adapters.ServingCorrection | None, str]:
    """The serving calibration `options.calibration` names for a profile (`hardware`: its slug, None for an inline
    or patched profile), and the note that says which (or that none reached). An unknown id is a 404, another
    profile's a 422, both naming `field`."""
    repo = ServingCalibrationRepository(session)
    if choice == "none":
        return None, "none"
    if choice == "latest":
        row = repo.latest(hardware) if hardware is not None else None
        if row is None:
            return None, "none: no serving calibration of this profile (POST /v1/calibrations with kind serving)"
    else:
        row = repo.get(int(choice))
        if row is None:
            raise NotFound(f"No serving calibration with id {choice}.")
        if row.hardware != hardware:
            raise invalid(field, f"serving calibration {row.id} was fitted on {row.hardware!r}, not this profile")
    p = row.parameters
    note = (
        f"serving calibration {row.id} ({row.hardware}, {row.engine or 'any engine'}, {row.model or 'any model'}, "
        f"{row.points} load tests): first_token_s {p['first_token_s']:.3g}, iteration_host_s "
        f"{p['iteration_host_s']:.3g}, prefill_factor {p['prefill_factor']:.3g}, decode_factor "
        f"{p['decode_factor']:.3g}; applied to the simulated TTFT and TPOT, end to end through both, a closed loop's "
        "throughput with its end-to-end latency"
    )
    return adapters.correction_of(p), note
