"""Calibration: learn, from measured timings, how far one device's kernels are from the roofline model.

Two layers, fitted per hardware profile and op family (and dtype):

1. A parametric correction of the model's time. The model's time is a fixed cost plus work, `t = overhead + w`;
   measured, `t ≈ L + w · u(z)` with `z = log10(w)`: `L` is the fitted fixed cost per call (launch overhead in the
   data's timing scope) and `u` the achieved utilisation relative to the model's, a quadratic in `z`, so it can
   change with size (small shapes reach less of peak). Fitted by linear least squares on relative error
   (weights 1/measured). A latency floor `F`, the shortest time measured, bounds it from below.
2. Where measurements are dense, interpolation between measured neighbours: the log-ratio of measured to
   parametric time at the k nearest measured points (distance in log2 of the op's sizes, one scale per size
   chosen by leave-one-out on the training points), inverse-distance weighted. Shapes whose nearest
   measurement is further than `radius` get the parametric layer only; shapes outside the measured range of
   work get the physical model unchanged. `apply` says which happened to each point.

The same idea as a measured-efficiency table with a roofline fallback (e.g. NVIDIA aiconfigurator's interpolated
per-shape tables; LLMCompass's and Vidur's profiled-then-interpolated operator times), here on the *ratio* to the
model, so tile and wave quantisation the model already captures are not smeared by the interpolation.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["MIN_POINTS", "Correction", "Method", "apply", "fit"]

Array = NDArray[np.float64]

MIN_POINTS = 8  # fewer measurements than this fit nothing: the physical model is used
RADIUS = 1.0  # scaled log2 units: a measured neighbour at most a factor of ~2 away in one size
EXTRAPOLATE_DECADES = 0.5  # how far outside the measured range of work the parametric layer still applies
SCALES = (0.5, 1.0, 2.0)
NEIGHBOURS = (3, 4, 6)
_CHUNK = 256
_OTHER_VARIANT = 1e6  # distance between points of different variants (other flags, e.g. causal or not)


class Method(IntEnum):
    """How a calibrated time was made."""

    physical = 0  # no correction: outside the measured range, or nothing fitted
    fitted = 1  # the parametric correction only (no measured neighbour close enough)
    interpolated = 2  # parametric correction and measured neighbours


@dataclass(frozen=True)
class Correction:
    """One fitted correction; `points` are the training ops' features (log2 sizes), `residuals` the log-ratio of
    measured to parametric time there, `variants` an integer per point (neighbours share a variant)."""

    launch_s: float
    floor_s: float
    coef: tuple[float, float, float]
    center: float
    work_range: tuple[float, float]  # log10 seconds of work, over the training points
    scale: tuple[float, ...]
    neighbours: int
    radius: float
    points: Array
    residuals: Array
    variants: NDArray[np.int64]

    def to_json(self) -> dict[str, Any]:
        return {
            "launch_s": self.launch_s,
            "floor_s": self.floor_s,
            "coef": list(self.coef),
            "center": self.center,
            "work_range": list(self.work_range),
            "scale": list(self.scale),
            "neighbours": self.neighbours,
            "radius": self.radius,
            "points": np.round(self.points, 6).tolist(),
            "residuals": np.round(self.residuals, 6).tolist(),
            "variants": self.variants.tolist(),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Correction:
        coef = doc["coef"]
        lo, hi = doc["work_range"]
        points = np.asarray(doc["points"], dtype=np.float64)
        return cls(
            launch_s=float(doc["launch_s"]),
            floor_s=float(doc["floor_s"]),
            coef=(float(coef[0]), float(coef[1]), float(coef[2])),
            center=float(doc["center"]),
            work_range=(float(lo), float(hi)),
            scale=tuple(float(s) for s in doc["scale"]),
            neighbours=int(doc["neighbours"]),
            radius=float(doc["radius"]),
            points=points.reshape(len(doc["residuals"]), -1),
            residuals=np.asarray(doc["residuals"], dtype=np.float64),
            variants=np.asarray(doc["variants"], dtype=np.int64),
        )


def _utilisation(coef: tuple[float, float, float], z: Array) -> Array:
    # Clipped: a quadratic fitted on a finite range must not turn negative (or explode) at its edges.
    out: Array = np.clip(coef[0] + coef[1] * z + coef[2] * z * z, 0.2, 5.0)
    return out


def _parametric(c: Correction, work_s: Array) -> Array:
    z = np.log10(work_s) - c.center
    out: Array = np.maximum(c.floor_s, c.launch_s + work_s * _utilisation(c.coef, z))
    return out


def _fit_parametric(work_s: Array, measured_s: Array) -> tuple[float, tuple[float, float, float], float]:
    """(L, utilisation coefficients, centre of z): least squares on relative error, L ≥ 0."""
    z_raw = np.log10(work_s)
    center = float(np.mean(z_raw))
    z = z_raw - center
    columns = [np.ones_like(work_s), work_s, work_s * z, work_s * z * z]
    spread = float(np.ptp(z))
    if spread < 0.3:  # all one size: a constant utilisation is all the data can tell
        columns = columns[:2]
    a = np.stack(columns, axis=1) / measured_s[:, None]
    b = np.ones_like(measured_s)
    sol, *_ = np.linalg.lstsq(a, b, rcond=None)
    launch = float(sol[0])
    if launch < 0:  # a negative fixed cost is the fit trading it for utilisation: pin it at zero
        sol = np.concatenate([[0.0], np.linalg.lstsq(a[:, 1:], b, rcond=None)[0]])
        launch = 0.0
    u = np.zeros(3)
    u[: len(sol) - 1] = sol[1:]
    return launch, (float(u[0]), float(u[1]), float(u[2])), center


def _distances(query: Array, q_var: NDArray[np.int64], points: Array, p_var: NDArray[np.int64], scale: Array) -> Array:
    diff = (query[:, None, :] - points[None, :, :]) * scale
    d: Array = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff)) + _OTHER_VARIANT * (q_var[:, None] != p_var[None, :])
    return d


def _interpolate(
    query: Array,
    q_var: NDArray[np.int64],
    points: Array,
    p_var: NDArray[np.int64],
    residuals: Array,
    scale: Array,
    k: int,
    radius: float,
    own: NDArray[np.int64] | None = None,
) -> tuple[Array, NDArray[np.bool_]]:
    """Inverse-distance-weighted residual of the k nearest points within `radius`; (value, found) per query.
    `own[i]` is the index of query i among the points when it is one of them (−1 otherwise): left out."""
    out = np.zeros(len(query))
    found = np.zeros(len(query), dtype=bool)
    k = min(k, len(points))
    if k <= 0:
        return out, found
    for start in range(0, len(query), _CHUNK):
        stop = min(start + _CHUNK, len(query))
        d = _distances(query[start:stop], q_var[start:stop], points, p_var, scale)
        if own is not None:
            mine = own[start:stop]
            rows = np.flatnonzero(mine >= 0)
            d[rows, mine[rows]] = np.inf
        nearest = np.argpartition(d, k - 1, axis=1)[:, :k]
        dn = np.take_along_axis(d, nearest, axis=1)
        weights = np.where(dn <= radius, 1.0 / (dn + 0.05) ** 2, 0.0)
        total = weights.sum(axis=1)
        ok = total > 0
        out[start:stop] = np.where(ok, (weights * residuals[nearest]).sum(axis=1) / np.where(ok, total, 1.0), 0.0)
        found[start:stop] = ok
    return out, found


def _loo_values(
    points: Array, variants: NDArray[np.int64], residuals: Array, scale: Array, k: int, sample: NDArray[np.int64]
) -> tuple[Array, NDArray[np.bool_]]:
    return _interpolate(points[sample], variants[sample], points, variants, residuals, scale, k, RADIUS, sample)


def fit(
    features: Array,
    work_s: Array,
    measured_s: Array,
    variants: NDArray[np.int64] | None = None,
    seed: int = 0,
) -> Correction | None:
    """Fit a correction from training measurements.

    features: (n, d) log2 of each op's sizes; work_s: (n,) the model's time less its fixed costs, seconds;
    measured_s: (n,) measured medians, seconds; variants: (n,) integers, points of different variants are never
    neighbours. Returns None with fewer than `MIN_POINTS` usable points.
    """
    features = np.asarray(features, dtype=np.float64)
    work_s, measured_s = np.asarray(work_s, dtype=np.float64), np.asarray(measured_s, dtype=np.float64)
    variants = np.zeros(len(work_s), dtype=np.int64) if variants is None else np.asarray(variants, dtype=np.int64)
    usable = (work_s > 0) & (measured_s > 0) & np.isfinite(work_s) & np.isfinite(measured_s)
    if np.count_nonzero(usable) < MIN_POINTS:
        return None
    features, work_s, measured_s, variants = features[usable], work_s[usable], measured_s[usable], variants[usable]
    launch, coef, center = _fit_parametric(work_s, measured_s)
    z = np.log10(work_s)
    base = Correction(
        launch_s=launch,
        floor_s=float(np.min(measured_s)),
        coef=coef,
        center=center,
        work_range=(float(z.min()), float(z.max())),
        scale=(1.0,) * features.shape[1],
        neighbours=NEIGHBOURS[0],
        radius=RADIUS,
        points=features,
        residuals=np.zeros(len(work_s)),
        variants=variants,
    )
    residuals = np.log(measured_s / _parametric(base, work_s))
    # Choose the neighbour count and one scale per size by leave-one-out on (a sample of) the training points:
    # coordinate descent, so d sizes cost 3·d·|SCALES| evaluations rather than |SCALES|^d.
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(len(work_s), size=min(len(work_s), 1500), replace=False))
    varying = [j for j in range(features.shape[1]) if np.ptp(features[:, j]) > 0]
    scale = np.ones(features.shape[1])
    best_k, best = NEIGHBOURS[0], np.inf
    for k in NEIGHBOURS:
        err = _loo_score(features, variants, residuals, scale, k, sample)
        if err < best:
            best_k, best = k, err
    for _, j in itertools.product(range(2), varying):
        for s in SCALES:
            trial = scale.copy()
            trial[j] = s
            err = _loo_score(features, variants, residuals, trial, best_k, sample)
            if err < best - 1e-12:
                scale, best = trial, err
    return Correction(
        launch_s=base.launch_s,
        floor_s=base.floor_s,
        coef=base.coef,
        center=base.center,
        work_range=base.work_range,
        scale=tuple(float(s) for s in scale),
        neighbours=best_k,
        radius=RADIUS,
        points=features,
        residuals=residuals,
        variants=variants,
    )


def _loo_score(
    points: Array, variants: NDArray[np.int64], residuals: Array, scale: Array, k: int, sample: NDArray[np.int64]
) -> float:
    values, _ = _loo_values(points, variants, residuals, scale, k, sample)
    err = np.abs(values - residuals[sample])
    return float(np.median(err) + np.percentile(err, 90)) / 2


def apply(
    c: Correction,
    features: Array,
    work_s: Array,
    physical_s: Array,
    variants: NDArray[np.int64] | None = None,
    own: NDArray[np.int64] | None = None,
) -> tuple[Array, NDArray[np.int64]]:
    """Calibrated seconds for each op, and how each was made (`Method`).

    features: (n, d) log2 sizes, as in `fit`; work_s: (n,) the model's time less its fixed costs; physical_s:
    (n,) the model's time, returned unchanged where the correction does not reach. `own[i]` ≥ 0 marks op i as
    training point `own[i]`: it is left out of its own neighbours (a leave-one-out value, not its measurement).
    """
    if len(work_s) == 0:  # nothing to correct (e.g. a held-out share that rounds to no results)
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    features = np.asarray(features, dtype=np.float64).reshape(len(work_s), -1)
    work_s, physical_s = np.asarray(work_s, dtype=np.float64), np.asarray(physical_s, dtype=np.float64)
    variants = np.zeros(len(work_s), dtype=np.int64) if variants is None else np.asarray(variants, dtype=np.int64)
    safe = np.where(work_s > 0, work_s, 1.0)
    z = np.log10(safe)
    lo, hi = c.work_range
    inside = (work_s > 0) & (z >= lo - EXTRAPOLATE_DECADES) & (z <= hi + EXTRAPOLATE_DECADES)
    parametric = _parametric(c, safe)
    residual, found = _interpolate(
        features, variants, c.points, c.variants, c.residuals, np.asarray(c.scale), c.neighbours, c.radius, own
    )
    time_s = np.where(inside, parametric * np.exp(residual), physical_s)
    method = np.where(inside, np.where(found, Method.interpolated, Method.fitted), Method.physical).astype(np.int64)
    return time_s, method
