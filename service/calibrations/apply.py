"""Calibrated predictions for incoming results: per op family, the newest calibration of their hardware that
covers it, if any."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import TypeAdapter
from sqlalchemy.orm import Session

from schemas.benchmarks import ResultOp
from service.benchmarks.predict import Predictions
from service.calibrations.repository import CalibrationRepository
from service.calibrations.service import calibrate_with

_OPS: TypeAdapter[list[ResultOp]] = TypeAdapter(list[ResultOp])


def calibrate_results(
    session: Session, hardware: str, ops: list[Any], preds: Predictions
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Calibrated seconds per op (NaN where no calibration covers it) and the calibration id used (0: none)."""
    recent = CalibrationRepository(session).recent(hardware)
    if not recent:
        return np.full(len(ops), np.nan), np.zeros(len(ops), dtype=np.int64)
    docs = _OPS.dump_python(ops, mode="json")
    calibrated, _, used = calibrate_with(recent, docs, preds.time_s - preds.overhead_s, preds.time_s)
    return calibrated, used
