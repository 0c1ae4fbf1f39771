"""Serving calibrations: named physical corrections of the simulation's means, fitted on measured load tests, and
applied to a serving estimate.

    TPOT' = decode_factor × TPOT + iteration_host_s
    TTFT' = first_token_s + prefill_factor × TTFT + iteration_host_s

`iteration_host_s` is host time each iteration spends outside the device (scheduling, sampling, detokenising: vLLM's
`EngineCore.step` around the model's forward); a decode iteration gives each sequence one token, so it adds to TPOT
whole, and the prompt's last iteration adds it to TTFT. `first_token_s` is a fixed cost of each request's first token
outside the engine loop (HTTP, tokenising the prompt, the first chunk's path to the client). The factors scale the
device time the roofline model gives each phase. Each is fitted by least squares on the stored pairs (predicted,
measured), as a fixed cost, a factor or both, whichever predicts the points best when each is left out in turn (a
handful of load tests cannot carry two parameters when their spread is noise); a parameter not fitted keeps its
neutral value (0 or 1). The held-out error leaves one load point out at a time: each point predicted by the fit on
the others.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from adapters._calibration_fit import error_stats

Array = NDArray[np.float64]


@dataclass(frozen=True)
class ServingCorrection:
    first_token_s: float = 0.0
    iteration_host_s: float = 0.0
    prefill_factor: float = 1.0
    decode_factor: float = 1.0

    def ttft(self, x: Array | float) -> Array | float:
        return self.first_token_s + self.prefill_factor * x + self.iteration_host_s

    def tpot(self, x: Array | float) -> Array | float:
        return self.decode_factor * x + self.iteration_host_s


def _spread(x: Array) -> bool:
    return x.size >= 2 and float(np.std(x)) > 1e-3 * float(np.mean(x))


def _candidates(x: Array, y: Array) -> list[tuple[float, float]]:
    """y ≈ a·x + b fitted three ways, fewest parameters first: a fixed cost alone (a = 1, b the median gap, never
    below 0), a factor alone (least squares through the origin), both (least squares; only where the points spread
    and the cost comes out ≥ 0: a fixed cost is never negative)."""
    out = [(1.0, max(0.0, float(np.median(y - x)))), (float(np.dot(x, y) / np.dot(x, x)), 0.0)]
    if _spread(x):
        a, b = np.linalg.lstsq(np.column_stack([x, np.ones_like(x)]), y, rcond=None)[0]
        if b >= 0 and a > 0:
            out.append((float(a), float(b)))
    return out


def _choose(x: Array, y: Array) -> tuple[float, float]:
    """The candidate (`_candidates`) whose leave-one-out error on the points themselves is least (the first of
    equals): a handful of load tests cannot carry a slope and an intercept when their spread is the tools' noise."""
    fits = _candidates(x, y)
    if x.size < 2:
        return fits[0]
    errors = []
    for k in range(len(fits)):
        ape = []
        for i in range(x.size):
            keep = np.arange(x.size) != i
            options = _candidates(x[keep], y[keep])
            a, b = options[k] if k < len(options) else options[-1]
            ape.append(abs((a * x[i] + b) / y[i] - 1))
        errors.append(float(np.median(ape)))
    return fits[int(np.argmin(errors))]


def fit_serving(ttft_p: Array, ttft_m: Array, tpot_p: Array, tpot_m: Array) -> ServingCorrection:
    """The corrections that bring predicted means to measured ones (seconds; one entry per load test)."""
    decode, host = _choose(tpot_p, tpot_m)
    prefill, first = _choose(ttft_p, ttft_m - host)
    return ServingCorrection(first, host, prefill, decode)


def held_out(ttft_p: Array, ttft_m: Array, tpot_p: Array, tpot_m: Array) -> dict[str, Any]:
    """Errors of TTFT and TPOT before (the simulation) and after (each point by the fit on the others)."""
    n = ttft_p.size
    after_ttft, after_tpot = np.empty(n), np.empty(n)
    for i in range(n):
        keep = np.arange(n) != i
        fit = fit_serving(ttft_p[keep], ttft_m[keep], tpot_p[keep], tpot_m[keep])
        after_ttft[i], after_tpot[i] = fit.ttft(ttft_p[i]), fit.tpot(tpot_p[i])
    return {
        "before": {"ttft": error_stats(ttft_p, ttft_m).model_dump(), "tpot": error_stats(tpot_p, tpot_m).model_dump()},
        "after": {
            "ttft": error_stats(after_ttft, ttft_m).model_dump(),
            "tpot": error_stats(after_tpot, tpot_m).model_dump(),
        },
    }


RATES = (
    "requests_per_s", "output_tokens_per_s", "output_tokens_per_s_per_device", "goodput_requests_per_s",
    "requests_per_s_p10", "requests_per_s_p90", "output_tokens_per_s_p10", "output_tokens_per_s_p90",
)  # fmt: skip


def correction_of(parameters: dict[str, Any]) -> ServingCorrection:
    return ServingCorrection(**{k: float(parameters[k]) for k in asdict(ServingCorrection())})


def calibrate_serving(doc: dict[str, Any], fix: ServingCorrection, closed_loop: bool) -> dict[str, Any]:
    """A `ServingRead` document with `fix` applied: TTFT and TPOT (mean, percentiles, the mean's interval) through
    their corrections, end to end as TTFT' plus the decode part scaled by TPOT' / TPOT, and a closed loop's
    throughputs and duration with the end-to-end latency (each client's cycle); an open loop's arrivals stay."""
    out = dict(doc)
    ttft, tpot, e2e = doc["ttft_s"], doc["tpot_s"], doc["e2e_s"]
    keys = ("mean", "p50", "p90", "p99", "mean_p10", "mean_p90")
    out["ttft_s"] = {k: (None if ttft.get(k) is None else float(fix.ttft(ttft[k]))) for k in keys}
    out["tpot_s"] = {k: (None if tpot.get(k) is None else float(fix.tpot(tpot[k]))) for k in keys}
    decode = max(0.0, e2e["mean"] - ttft["mean"])
    ratio = out["tpot_s"]["mean"] / tpot["mean"] if tpot["mean"] > 0 else 1.0
    new_mean = out["ttft_s"]["mean"] + decode * ratio
    scale = new_mean / e2e["mean"] if e2e["mean"] > 0 else 1.0
    out["e2e_s"] = {k: (None if e2e.get(k) is None else float(e2e[k] * scale)) for k in keys}
    out["e2e_s"]["mean"] = new_mean
    if closed_loop and scale > 0:
        for k in RATES:
            if out.get(k) is not None:
                out[k] = out[k] / scale
        out["duration_s"] = doc["duration_s"] * scale
    if out["tpot_s"]["mean"] > 0:
        out["output_tokens_per_s_per_user"] = doc["output_tokens_per_s_per_user"] * tpot["mean"] / out["tpot_s"]["mean"]
    return out
