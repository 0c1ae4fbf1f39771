"""Calibrated predictions for incoming results: the latest calibration of their hardware profile, if any."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import TypeAdapter
from sqlalchemy.orm import Session

from schemas.benchmarks import ResultOp
from service.benchmarks.predict import Predictions
from service.calibrations.repository import CalibrationRepository
from service.calibrations.service import calibrate

_OPS: TypeAdapter[list[ResultOp]] = TypeAdapter(list[ResultOp])


def calibrate_results(
    session: Session, hardware: str, ops: list[Any], preds: Predictions
) -> tuple[NDArray[np.float64], int | None]:
    """Calibrated seconds per op (NaN where the latest calibration does not cover it) and that calibration's id."""
    latest = CalibrationRepository(session).latest(hardware)
    if latest is None:
        return np.full(len(ops), np.nan), None
    docs = _OPS.dump_python(ops, mode="json")
    calibrated, _ = calibrate(latest, docs, preds.time_s - preds.overhead_s, preds.time_s)
    return calibrated, latest.id
