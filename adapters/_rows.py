"""Core estimates (`roofline.Estimate`) as response items: plain dicts with exactly `schemas.estimates.EstimateRead`'s
fields, in order, every number a Python float checked finite. numpy stops here."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

import roofline
from adapters._errors import non_finite
from adapters._hardware import cache_state

BOUNDS = ("compute", "memory", "overhead")
MATMUL_FIELDS = ("tiles", "waves", "wave_efficiency")
# The prediction interval (`adapters.with_interval`) travels in `Estimate.extra` and is rendered beside time_s, not in
# details; an estimate without one renders null.
INTERVAL_FIELDS = ("time_s_p10", "time_s_p90")
HIDDEN_DETAILS = (*MATMUL_FIELDS, *INTERVAL_FIELDS)


def with_assumptions(est: roofline.Estimate, hw: roofline.Hardware, hardware_name: str) -> roofline.Estimate:
    """The estimate, with what it assumed of the device in `assumptions` (no calibration yet)."""
    est.assumptions.update(
        {
            "hardware": hardware_name,
            "efficiency": {"matmul": hw.eff_matmul, "vector": hw.eff_vector, "memory": hw.eff_memory},
            "launch_overhead_s": hw.launch_s,
            "cache": cache_state(hw),
            "calibration": "none",
        }
    )
    return est


def _capped(intensity: float | NDArray[np.float64]) -> float | NDArray[np.float64]:
    """No bytes (a pure-math op): intensity ∞, which JSON cannot carry; 1e300 reads as "unbounded"."""
    if isinstance(intensity, float):
        return min(intensity, 1e300)
    out: NDArray[np.float64] = np.minimum(intensity, 1e300)
    return out


def _numbers_of(est: roofline.Estimate, details: bool = True) -> dict[str, Any]:
    """The numeric columns of a response item, then (`details`) the op's own figures, `details.`-prefixed."""
    columns = {
        "time_s": est.time_s,
        "flops": est.flops,
        "bytes": est.bytes,
        "arithmetic_intensity": _capped(est.arithmetic_intensity),
        "critical_intensity": est.critical_intensity,
        "compute_time_s": est.compute_s,
        "memory_time_s": est.memory_s,
        "overhead_s": est.overhead_s,
        "peak_flops_per_s": est.peak_flops_per_s,
    }
    if details:
        columns.update({f"details.{name}": values for name, values in est.extra.items()})
    return columns


def item_dict(est: roofline.Estimate) -> dict[str, Any]:
    """`item_dicts(est, where=None)[0]` for a single estimate, with Python's float() and math.isfinite() per number
    instead of numpy's matrix: the column path costs several times more, which matters on /v1/estimate/op, the
    service's hot path (bench/throughput.py). tests/adapters/test_rows.py holds the two paths equal."""
    if not isinstance(est.time_s, float):
        return item_dicts(est, where=None)[0]
    top = {name: float(value) for name, value in _numbers_of(est, details=False).items()}
    extra = {name: float(value) for name, value in est.extra.items()}
    for name, value in top.items():
        if not math.isfinite(value):
            raise non_finite(f"response.{name}")
    peak, time_s, flops = top.pop("peak_flops_per_s"), top["time_s"], top["flops"]
    for name, value in extra.items():
        if not math.isfinite(value):
            raise non_finite(f"response.details.{name}")
    is_matmul = "tiles" in extra
    return {
        "time_s": top.pop("time_s"),
        "time_s_p10": extra.get("time_s_p10"),
        "time_s_p90": extra.get("time_s_p90"),
        **top,
        "bound": BOUNDS[int(est.bound)],
        "unit": est.unit,
        "peak_flops_per_s": peak,
        "achieved_flops_per_s": flops / time_s if time_s > 0 else 0.0,
        "tiles": extra["tiles"] if is_matmul else None,
        "waves": extra["waves"] if is_matmul else None,
        "wave_efficiency": extra["wave_efficiency"] if is_matmul else None,
        "tile": [int(extra["tile_m"]), int(extra["tile_n"])] if is_matmul else None,
        "details": {name: value for name, value in extra.items() if name not in HIDDEN_DETAILS},
        "assumptions": est.assumptions,
    }


def item_dicts(
    est: roofline.Estimate,
    where: str | None = "response.items",
    positions: Sequence[int] | None = None,
    calibration: Sequence[Any] | None = None,
) -> list[dict[str, Any]]:
    """One response item per point of an estimate, as plain dicts with exactly `EstimateRead`'s fields, in order.

    Every number goes into one (columns × points) float64 matrix, checked finite in one call and turned into Python
    floats in one `tolist()`, then zipped into rows: a sweep of many points costs a fraction of constructing one
    pydantic model per point (bench/estimate_sweep.py), and a single estimate a fraction of a numpy call per column
    (bench/throughput.py). A non-finite number is an `InvalidField` naming it: `where` names the items (None: one item,
    `response.<field>`), `positions` each point's place among them (default: its own index). `calibration`: each
    point's `assumptions.calibration`, where a calibration applied to the points one by one.
    """
    shape = np.shape(est.time_s)
    size = int(np.prod(shape))
    numbers = _numbers_of(est)
    try:  # every column of one shape (a single estimate's 0-d numbers): one call, where a loop costs many
        matrix = np.array(list(numbers.values()), dtype=np.float64)
        if matrix.shape != (len(numbers), *shape):
            raise ValueError("columns of different shapes")
        matrix = matrix.reshape(len(numbers), size)
    except ValueError:  # a sweep's constant columns are 0-d beside its varied ones: broadcast each
        matrix = np.empty((len(numbers), size))
        for index, values in enumerate(numbers.values()):
            matrix[index] = values if np.ndim(values) == 0 else np.broadcast_to(values, shape).reshape(-1)
    bad = ~np.isfinite(matrix)
    if bad.any():  # JSON has no NaN or ∞: an encoder would write null where the schema promises a number
        column, point = np.unravel_index(int(np.argmax(bad)), bad.shape)
        name = list(numbers)[int(column)]
        place = int(point) if positions is None else positions[int(point)]
        raise non_finite(f"response.{name}" if where is None else f"{where}.{place}.{name}")
    columns_in = dict(zip(numbers, matrix.tolist(), strict=True))
    extra = {name[len("details.") :]: values for name, values in columns_in.items() if name.startswith("details.")}
    time_s, flops = matrix[0], matrix[1]
    is_matmul = "tiles" in extra
    absent: list[Any] = [None] * size
    detail_names = [name for name in extra if name not in HIDDEN_DETAILS]
    columns: dict[str, list[Any]] = {
        "time_s": columns_in["time_s"],
        "time_s_p10": extra.get("time_s_p10", absent),
        "time_s_p90": extra.get("time_s_p90", absent),
        "flops": columns_in["flops"],
        "bytes": columns_in["bytes"],
        "arithmetic_intensity": columns_in["arithmetic_intensity"],
        "critical_intensity": columns_in["critical_intensity"],
        "compute_time_s": columns_in["compute_time_s"],
        "memory_time_s": columns_in["memory_time_s"],
        "overhead_s": columns_in["overhead_s"],
        "bound": np.asarray(BOUNDS)[np.broadcast_to(est.bound, shape).ravel()].tolist(),
        "unit": [est.unit] * size,
        "peak_flops_per_s": columns_in["peak_flops_per_s"],
        "achieved_flops_per_s": np.divide(flops, time_s, out=np.zeros_like(time_s), where=time_s > 0).tolist(),
        "tiles": extra["tiles"] if is_matmul else absent,
        "waves": extra["waves"] if is_matmul else absent,
        "wave_efficiency": extra["wave_efficiency"] if is_matmul else absent,
        "tile": [[int(m), int(n)] for m, n in zip(extra["tile_m"], extra["tile_n"], strict=True)]
        if is_matmul
        else absent,
        "details": [
            dict(zip(detail_names, values, strict=True))
            for values in zip(*(extra[n] for n in detail_names), strict=True)
        ]
        if detail_names
        else [{} for _ in range(size)],
        "assumptions": [est.assumptions] * size
        if calibration is None
        else [{**est.assumptions, "calibration": info} for info in calibration],
    }
    names = list(columns)
    return [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]
