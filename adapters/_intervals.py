"""Prediction intervals on op estimates: the shipped table of bands (`intervals.json` beside this module, written by
`python -m bench.intervals` from the validation's leave-one-device-out residuals) applied by `roofline.intervals`,
or a calibration's own residual spread where a calibration corrected the estimate (docs/model/intervals.md)."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import roofline
from adapters._calibration import METHODS, Chosen, covering, group_of
from roofline.calibration import Correction, Method
from roofline.intervals import QUANTILES, Band, IntervalTable, family, regime
from schemas.ops import Op

TABLE_PATH = Path(__file__).with_name("intervals.json")
SOURCE = "leave-one-device-out residuals of the validation (python -m bench.intervals)"
CALIBRATED_SOURCE = "the applied calibration's own residuals, capped by the shipped band"


@functools.cache
def interval_table() -> IntervalTable:
    """The shipped table, parsed once per process."""
    doc: dict[str, Any] = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
    return IntervalTable.from_json(doc)


def interval_family(op: Op, q_len: float | None = None) -> str:
    """The family an op's interval is taken from (`roofline.intervals.family`): attention's decode is one query, or
    `q_len` for a point of a sweep."""
    if op.kind == "attention":
        q = op.q_len if q_len is None else q_len
        return family(op.kind, decode=q == 1)
    if op.kind == "matmul":
        return family(op.kind, str(op.dtype), str(op.quantization))
    return family(op.kind)


def calibration_band(correction: Correction, shipped: Band) -> Band:
    """A calibration's own spread: the 10th and 90th percentiles of measured / fitted time at its training points
    (`Correction.residuals`, the log-ratios), never wider on either side than the shipped band (calibration narrows
    an interval, it never widens it)."""
    own = Band.of(np.exp(correction.residuals))
    low = max(min(own.low, 1.0), min(shipped.low, 1.0))
    high = min(max(own.high, 1.0), max(shipped.high, 1.0))
    return Band(low, high, own.rows, 1)


def with_interval(
    est: roofline.Estimate, families: str | Sequence[str], correction: Correction | None = None
) -> roofline.Estimate:
    """The estimate with `time_s_p10` and `time_s_p90` (in `extra`, rendered beside time_s) and, in
    `assumptions.interval`, where they came from (the same for every point: a sweep's point answers as its single
    estimate does; the band of a family and regime is in the table). `families`: one for every point, or one per
    point. The regime is the physical model's (`details.raw_time_s` where a calibration changed time_s)."""
    table = interval_table()
    raw = est.extra.get("raw_time_s", est.time_s)
    regimes = regime(raw, est.overhead_s, est.compute_s, est.memory_s)
    info = {"quantiles": list(QUANTILES), "source": SOURCE if correction is None else CALIBRATED_SOURCE}
    if isinstance(est.time_s, float):  # one point in floats (the op endpoint's hot path)
        family = families if isinstance(families, str) else families[0]
        band = table.band(family, str(regimes))[1]
        if correction is not None:
            band = calibration_band(correction, band)
        p10, p90 = band.bounds(est.time_s)
    else:
        shape = np.shape(est.time_s)
        fam = np.broadcast_to(np.asarray(families), shape)
        reg = np.broadcast_to(np.asarray(regimes), shape)
        calibrated = None if correction is None else functools.partial(calibration_band, correction)
        low, high = table.factors(fam, reg, calibrated)
        p10, p90 = est.time_s * low, est.time_s * high
    extra = {**est.extra, "time_s_p10": p10, "time_s_p90": p90}
    return dataclasses.replace(est, extra=extra, assumptions={**est.assumptions, "interval": info})


def applied_correction(chosen: Chosen, doc: dict[str, Any], info: dict[str, Any]) -> Correction | None:
    """The fitted correction a calibration applied to one op (its JSON `doc`, `info` = its
    `assumptions.calibration`); None where the physical model stood."""
    if info.get("method") not in (METHODS[Method.fitted], METHODS[Method.interpolated]):
        return None
    found = covering(chosen.calibrations, group_of(doc))
    return None if found is None else found[1].correction
