"""Fitting a calibration on measured results: per op family and dtype, a random part held out (seeded), the rest fitted
(`roofline.calibration.fit`) and the held-out part measured before and after (`roofline.calibration.apply`).

Pure numbers on the results' op documents and arrays: which results, and where the fit is stored, are the service's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from adapters._calibration import METHODS, UNCALIBRATED, describe, group_of, variant_codes
from roofline.calibration import apply, fit
from schemas.calibrations import CalibrationGroup, ErrorStats


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


def calibration_groups(
    docs: Sequence[dict[str, Any]], measured: NDArray[np.float64], work: NDArray[np.float64]
) -> dict[str, list[int]]:
    """The positions of the results a calibration can learn from, per group (`family/dtype`): a positive measured
    time and a positive predicted work time, of an op kind that has sizes of its own (not `UNCALIBRATED`)."""
    usable = (work > 0) & (measured > 0)
    by_group: dict[str, list[int]] = {}
    for i, doc in enumerate(docs):
        if usable[i] and doc["kind"] not in UNCALIBRATED:
            by_group.setdefault(group_of(doc), []).append(i)
    return by_group


@dataclass(frozen=True)
class CalibrationFit:
    """What `fit_calibration` found: the model to store (per group its correction, variants and feature names), each
    group's summary, the held-out error of all groups together before and after, and the training points."""

    model: dict[str, Any]
    groups: list[CalibrationGroup]
    before: ErrorStats
    after: ErrorStats
    trained: dict[int, int]  # a result's position → its index among its group's training points


def fit_calibration(
    by_group: dict[str, list[int]],
    docs: Sequence[dict[str, Any]],
    measured: NDArray[np.float64],
    physical: NDArray[np.float64],
    work: NDArray[np.float64],
    *,
    seed: int,
    holdout_fraction: float,
) -> CalibrationFit | None:
    """Fits each group of `calibration_groups` on a random part of its results and measures it on the rest
    (`holdout_fraction` of them, drawn by one generator seeded with `seed`, groups in name order); None when no group
    has enough training points (`roofline.calibration.MIN_POINTS`). `physical` is the predicted time, `work` the
    same less the predicted overhead."""
    rng = np.random.default_rng(seed)
    model: dict[str, Any] = {"groups": {}}
    groups: list[CalibrationGroup] = []
    held_pred: list[NDArray[np.float64]] = []
    held_raw: list[NDArray[np.float64]] = []
    held_meas: list[NDArray[np.float64]] = []
    trained: dict[int, int] = {}
    for name, indices in sorted(by_group.items()):
        idx = np.asarray(indices)
        order = rng.permutation(len(idx))
        n_hold = round(len(idx) * holdout_fraction)
        train, hold = np.sort(idx[order[n_hold:]]), np.sort(idx[order[:n_hold]])
        keys, features, names = describe([docs[i] for i in idx])
        known = sorted(set(keys))
        codes = variant_codes(keys, known)
        position = {int(i): p for p, i in enumerate(idx)}
        tp = np.array([position[int(i)] for i in train], dtype=np.int64)
        correction = fit(features[tp], work[train], measured[train], codes[tp], seed=seed)
        if correction is None:
            continue
        trained.update({int(i): k for k, i in enumerate(train)})
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
        return None
    return CalibrationFit(
        model=model,
        groups=groups,
        before=error_stats(np.concatenate(held_raw), np.concatenate(held_meas)),
        after=error_stats(np.concatenate(held_pred), np.concatenate(held_meas)),
        trained=trained,
    )
