"""Decode sampling: which steps are evaluated (all of them up to `InferenceRun.decode_samples`, else evenly spaced
ones and every step where the active batch changes), which requests are active at each, and the weights that sum the
samples as the piecewise-linear interpolant between them would.

Steps j = 1 … S (S = longest output − 1); request i is active while j ≤ o_i − 1 and its new token attends to its
p_i + j cached keys (itself included).
"""

from __future__ import annotations

import numpy as np

from roofline._num import Array
from roofline.inference._config import IntArray


def sample_steps(outputs: IntArray, steps: int, limit: int) -> IntArray:
    """The decode steps evaluated: every one of the `steps` up to `limit` of them, else `limit` evenly spaced ones
    and the steps where the active batch changes (`outputs`: output tokens per kind of request)."""
    if steps <= limit:
        return np.arange(1, steps + 1, dtype=np.int64)
    grid = np.rint(np.linspace(1, steps, limit)).astype(np.int64)
    # Steps where the active batch changes are kept with their neighbours: no interpolation straddles one.
    ends = outputs - 1
    breaks = np.concatenate([ends, ends + 1])
    breaks = breaks[(breaks >= 1) & (breaks <= steps)]
    out: IntArray = np.unique(np.concatenate([grid, breaks]))
    return out


def active_requests(samples: IntArray, prompts: Array, outputs: IntArray, weights: Array) -> tuple[Array, Array]:
    """Requests still decoding at each sampled step and the sum of their contexts (keys their new tokens attend to),
    from cumulative sums over the kinds of request ordered by their last step (no steps × kinds matrix)."""
    ends = outputs - 1
    order = np.argsort(ends, kind="stable")
    cum_w = np.concatenate([[0.0], np.cumsum(weights[order])])
    cum_wp = np.concatenate([[0.0], np.cumsum((weights * prompts)[order])])
    done = np.searchsorted(ends[order], samples, side="left")  # kinds whose last step is earlier
    active: Array = cum_w[-1] - cum_w[done]
    contexts: Array = cum_wp[-1] - cum_wp[done] + samples * active
    return active, contexts


def linear_weights(samples: IntArray) -> Array:
    """Weights w such that Σ w·f(samples) = Σ_{j = first … last} f̂(j), f̂ the piecewise-linear interpolant of f
    between consecutive samples. Between samples a < b (n = b − a) the steps a … b − 1 contribute (n + 1)/2 of
    f(a) and (n − 1)/2 of f(b); the last sample adds itself once. All ones when every step is a sample."""
    w = np.zeros(samples.size)
    gaps = np.diff(samples).astype(np.float64)
    w[:-1] += (gaps + 1.0) / 2.0
    w[1:] += (gaps - 1.0) / 2.0
    w[-1] += 1.0
    return w
