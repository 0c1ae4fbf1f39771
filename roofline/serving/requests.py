"""Drawing requests: lengths fixed or from a distribution (uniform, normal, log-normal, empirical) and arrivals of
an open loop (Poisson, or gamma inter-arrival times of a given coefficient of variation), all from one seeded
generator so a run is repeatable; loads that share prefixes and multi-turn sessions (`roofline.serving._sharing`)."""

from __future__ import annotations

import numpy as np

from roofline.serving._config import FloatArray, IntArray, ServingConfigError
from roofline.serving._sharing import POPULARITIES, group_of, sessions, sharing

__all__ = [
    "LENGTH_KINDS",
    "POPULARITIES",
    "adapters",
    "arrivals",
    "group_of",
    "lengths",
    "sessions",
    "sharing",
]

LENGTH_KINDS = ("fixed", "uniform", "normal", "lognormal", "empirical")


def lengths(
    rng: np.random.Generator,
    count: int,
    kind: str,
    field: str,
    value: float = 0.0,
    low: float = 0.0,
    high: float = 0.0,
    mean: float = 0.0,
    std: float = 0.0,
    values: list[int] | None = None,
) -> IntArray:
    """`count` token counts, each at least 1. `normal` and `lognormal` take the mean and standard deviation of the
    lengths themselves (the log-normal's parameters follow: σ² = ln(1 + std²/mean²), μ = ln mean − σ²/2)."""
    if kind == "fixed":
        out = np.full(count, value)
    elif kind == "uniform":
        out = rng.integers(int(low), int(high) + 1, size=count)
    elif kind == "normal":
        out = rng.normal(mean, std, size=count)
    elif kind == "lognormal":
        s2 = np.log1p((std / mean) ** 2)
        out = rng.lognormal(np.log(mean) - s2 / 2.0, np.sqrt(s2), size=count)
    elif kind == "empirical":
        if not values:
            raise ServingConfigError(f"{field}.values", "an empirical distribution needs at least one length")
        out = rng.choice(np.asarray(values, dtype=np.float64), size=count)
    else:
        raise ServingConfigError(f"{field}.kind", f"one of {', '.join(LENGTH_KINDS)}")
    result: IntArray = np.maximum(1, np.rint(out)).astype(np.int64)
    return result


def arrivals(
    rng: np.random.Generator, count: int, rate: float, process: str = "poisson", cv: float = 1.0
) -> FloatArray:
    """Arrival times of an open loop at `rate` requests/s: exponential gaps (Poisson) or gamma gaps with
    coefficient of variation `cv` (shape 1/cv²; cv = 1 is Poisson, below is smoother, above burstier)."""
    if process == "poisson":
        gaps = rng.exponential(1.0 / rate, size=count)
    else:
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=count)
    out: FloatArray = np.cumsum(gaps) - gaps[0]
    return out


def adapters(rng: np.random.Generator, count: int, adapters: int, popularity: str = "uniform",
             exponent: float = 1.0) -> IntArray:  # fmt: skip
    """Each request's LoRA adapter, 0 … adapters − 1, with a popularity: uniform, or Zipf (adapter k, 1-based,
    chosen ∝ k^−exponent), drawn as prefix groups are (`group_of`)."""
    if popularity not in POPULARITIES:
        raise ServingConfigError("load.adapters.popularity", f"one of {', '.join(POPULARITIES)}")
    return group_of(rng, count, adapters, popularity, exponent)
