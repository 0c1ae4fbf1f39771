"""Calibrated predictions for stored and incoming results (the latest calibration of a hardware profile)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy.orm import Session

from service.benchmarks.predict import Predictions


def calibrate_results(
    session: Session, hardware: str, ops: list[Any], preds: Predictions
) -> tuple[NDArray[np.float64], int | None]:
    """Calibrated seconds for each op (NaN where the latest calibration does not cover it) and that calibration's id."""
    return np.full(len(ops), np.nan), None
