"""Prediction intervals: how far measured times fall from the model's, per op family and regime, as a band of ratios.

A band is a pair of percentiles of measured / predicted time over the leave-one-device-out residuals of the
validation (`python -m bench.intervals` writes the table; docs/model/intervals.md): a new estimate t gets
[t · q_low, t · q_high], widened to contain t itself (p10 ≤ t ≤ p90 always: the model's own figure is never outside its
interval). Residuals are weighted so that every measured device counts the same, whatever its number of rows. The
percentiles are the 10th and 90th, or wider for a family whose residuals on the devices it was not built from fall
outside the 10th-90th more than a fifth of the time (`IntervalTable.levels`, chosen by bench.intervals): the interval
is meant to hold 80 % of a new device's measurements, and the spread between devices is wider than within one.

The regime of an estimate is what dominates it: `small` when its work (time less fixed costs) is under
`SMALL_WORK_S` (the fixed costs of every timing scope, 1-13 µs, are then comparable to the work, and the residuals
are those of the fixed costs), else `compute` or `memory`, whichever of the two times is larger.

This module is pure: the table is data the caller loads and passes in (`IntervalTable.from_json`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "ANY",
    "COLLECTIVE",
    "LARGE_MESSAGE_BYTES",
    "MIN_DEVICES",
    "MIN_ROWS",
    "QUANTILES",
    "REGIMES",
    "SMALL_WORK_S",
    "Band",
    "IntervalTable",
    "band_of",
    "collective_regime",
    "family",
    "regime",
    "weighted_quantiles",
]

Array = NDArray[np.float64]

QUANTILES = (0.1, 0.9)
REGIMES = ("small", "compute", "memory")
SMALL_WORK_S = 10e-6
MIN_ROWS = 50  # a (family, regime) cell with fewer rows falls back to its family's pooled band, then the regime's
# A band measured on fewer devices than this cannot say how far a new device sits from them (issue 21: one generation
# is held out): it is widened to contain the band of its regime over every family (`IntervalTable.band`).
MIN_DEVICES = 3
ANY = "*"

# The validation's families as an op names them (bench.intervals.FAMILIES): quantised products by scheme, narrow
# and fp32 inputs; the kinds with rows of their own; everything else takes the pooled band of its regime (`ANY`).
_QUANTIZED_FAMILY = {"fp8_tensor": "gemm-fp8", "fp8_block": "gemm-fp8-block", "nvfp4": "gemm-fp4"}
_NARROW_FAMILY = {"fp8": "gemm-fp8", "fp4": "gemm-fp4", "fp32": "gemm-fp32"}
_OWN_FAMILY = (
    "moe", "matmul", "rmsnorm", "layernorm", "softmax", "activation", "elementwise", "rotary", "embedding",
    "collective",
)  # fmt: skip
# Collectives (NCCL's and the others `bench.validate_collectives` measures) are a family of their own, outside the
# pooled bands. Their regime is the fabric's class (`roofline.collectives.FABRIC_CLASSES`: a scale-up domain, the
# host's PCIe, a network between nodes; their spreads differ several-fold, decision 0039) and the message's size:
# `latency` below `LARGE_MESSAGE_BYTES` (each step's fixed cost), `bandwidth` from it on (issue 21's NCCL target
# counts messages ≥ 1 MiB). E.g. `scale_up-bandwidth`.
COLLECTIVE = "collective"
LARGE_MESSAGE_BYTES = float(1 << 20)


def collective_regime(message_bytes: Any, fabric: str) -> Any:
    """`{fabric}-latency` or `{fabric}-bandwidth` for one collective's message (a float: a str) or many (an array)."""
    if isinstance(message_bytes, float | int):
        return f"{fabric}-latency" if message_bytes < LARGE_MESSAGE_BYTES else f"{fabric}-bandwidth"
    return np.where(np.asarray(message_bytes) < LARGE_MESSAGE_BYTES, f"{fabric}-latency", f"{fabric}-bandwidth")


def family(kind: str, dtype: str = "bf16", quantization: str = "none", decode: bool = False) -> str:
    """The family an op's interval is taken from: its kind; a matmul by its quantisation scheme or its input type
    (a plain fp4 product is NVFP4's class); attention split into `attention-decode` (one query) and
    `attention-prefill`; `ANY` for kinds the validation has no rows of."""
    if kind == "attention":
        return "attention-decode" if decode else "attention-prefill"
    if kind == "matmul":
        if quantization != "none":
            return _QUANTIZED_FAMILY[quantization]
        return _NARROW_FAMILY.get(dtype, "matmul")
    return kind if kind in _OWN_FAMILY else ANY


def regime(time_s: Any, overhead_s: Any, compute_s: Any, memory_s: Any) -> Any:
    """`small`, `compute` or `memory` for one estimate (floats: a str) or many (arrays: an array of str)."""
    if all(isinstance(x, float) for x in (time_s, overhead_s, compute_s, memory_s)):  # one point stays in floats
        if time_s - overhead_s < SMALL_WORK_S:
            return "small"
        return "compute" if compute_s >= memory_s else "memory"
    work = np.asarray(time_s, dtype=np.float64) - np.asarray(overhead_s, dtype=np.float64)
    out = np.where(
        work < SMALL_WORK_S,
        "small",
        np.where(np.asarray(compute_s) >= np.asarray(memory_s), "compute", "memory"),
    )
    return str(out) if out.ndim == 0 else out


def weighted_quantiles(values: Sequence[float] | Array, weights: Sequence[float] | Array, qs: Sequence[float]) -> Array:
    """Quantiles of weighted values: sorted, each value at the midpoint of its weight's share of the cumulative
    weight, linear between them, the extremes beyond (with equal weights: the plotting positions (i − ½)/n of Hazen,
    numpy's `percentile(..., method="hazen")`)."""
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if v.size == 0 or v.shape != w.shape or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("quantiles need values and as many non-negative weights, not all zero")
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    positions = (np.cumsum(w) - w / 2.0) / w.sum()
    out: Array = np.interp(np.asarray(qs, dtype=np.float64), positions, v)
    return out


@dataclass(frozen=True)
class Band:
    """The ratios measured / predicted at a pair of quantiles (`QUANTILES`, or its family's level) over `rows`
    residuals (`devices` measured devices)."""

    low: float
    high: float
    rows: int
    devices: int = 1

    @classmethod
    def of(
        cls,
        ratios: Sequence[float] | Array,
        weights: Sequence[float] | Array | None = None,
        devices: int = 1,
        quantiles: tuple[float, float] = QUANTILES,
    ) -> Band:
        r = np.asarray(ratios, dtype=np.float64)
        w = np.ones_like(r) if weights is None else np.asarray(weights, dtype=np.float64)
        low, high = weighted_quantiles(r, w, quantiles)
        return cls(float(low), float(high), int(r.size), devices)

    def bounds(self, time_s: Any) -> tuple[Any, Any]:
        """p10 and p90 seconds around `time_s`, widened to contain it."""
        return time_s * min(self.low, 1.0), time_s * max(self.high, 1.0)

    def to_json(self) -> dict[str, Any]:
        return {"low": round(self.low, 6), "high": round(self.high, 6), "rows": self.rows, "devices": self.devices}


def band_of(ratios: Array, devices: Sequence[str] | NDArray[np.str_], low: float = QUANTILES[0]) -> Band:
    """The band of residual ratios from several devices, each device weighing the same (its rows share its weight),
    at the `low` and 1 − `low` quantiles."""
    d = np.asarray(devices)
    names, index, counts = np.unique(d, return_inverse=True, return_counts=True)
    return Band.of(ratios, 1.0 / counts[index], devices=len(names), quantiles=(low, 1.0 - low))


@dataclass(frozen=True)
class IntervalTable:
    """Bands by `family/regime`, `family/*` (every regime of a family) and `*/regime` (every family). `levels`: the
    lower quantile of a family's bands where it is not `QUANTILES[0]` (the upper one is 1 − it); pooled bands
    (`*/…`) are at `QUANTILES`."""

    bands: Mapping[str, Band]
    generated_by: str = ""
    levels: Mapping[str, float] = field(default_factory=dict)

    def band(self, family: str, regime: str) -> tuple[str, Band]:
        """The band for an op of `family` in `regime`: its own cell if it has `MIN_ROWS` rows, else its family's, else
        the regime's over every family, else every residual; with the key it came from. A band from fewer than
        `MIN_DEVICES` devices is widened to contain the pooled band of its regime (key `cell+pooled`): the spread of
        a few devices says little of where the next one falls."""
        for key in (f"{family}/{regime}", f"{family}/{ANY}", f"{ANY}/{regime}", f"{ANY}/{ANY}"):
            found = self.bands.get(key)
            if found is not None and found.rows >= MIN_ROWS:
                if found.devices < MIN_DEVICES and not key.startswith(ANY):
                    for wider_key in (f"{ANY}/{regime}", f"{ANY}/{ANY}"):
                        wider = self.bands.get(wider_key)
                        if wider is not None and wider.rows >= MIN_ROWS:
                            merged = Band(min(found.low, wider.low), max(found.high, wider.high), found.rows,
                                          found.devices)  # fmt: skip
                            return f"{key}+{wider_key}", merged
                return key, found
        raise KeyError(f"no band for {family}/{regime}: the table has no pooled band")

    def factors(self, families: Any, regimes: Any, adjust: Callable[[Band], Band] | None = None) -> tuple[Array, Array]:
        """Per point, the factors p10 / t and p90 / t (≤ 1 and ≥ 1: the interval holds t) of the points' bands, each
        band passed through `adjust` first when given; `families` and `regimes` broadcast to one shape."""
        fam, reg = np.broadcast_arrays(np.asarray(families), np.asarray(regimes))
        low, high = np.ones(fam.shape), np.ones(fam.shape)
        left = np.ones(fam.shape, dtype=bool)
        while left.any():  # one family at a time (a call has one or two), each regime by a mask: no per-point loop
            f = str(fam[left].flat[0])
            of_f = left & (fam == f)
            for g in {str(r) for r in np.unique(reg[of_f])}:
                band = self.band(f, g)[1]
                band = adjust(band) if adjust is not None else band
                at = of_f & (reg == g)
                low[at], high[at] = min(band.low, 1.0), max(band.high, 1.0)
            left &= ~of_f
        return low, high

    def to_json(self) -> dict[str, Any]:
        return {
            "generated_by": self.generated_by,
            "quantiles": list(QUANTILES),
            "small_work_s": SMALL_WORK_S,
            "min_rows": MIN_ROWS,
            "levels": dict(self.levels),
            "bands": {key: band.to_json() for key, band in self.bands.items()},
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> IntervalTable:
        if list(doc["quantiles"]) != list(QUANTILES) or doc["small_work_s"] != SMALL_WORK_S:
            raise ValueError("interval table made for other quantiles or regimes: regenerate it (bench.intervals)")
        bands = {key: Band(b["low"], b["high"], b["rows"], b["devices"]) for key, b in doc["bands"].items()}
        return cls(bands, doc.get("generated_by", ""), dict(doc.get("levels", {})))
