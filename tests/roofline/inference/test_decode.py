"""The decode (`roofline.inference`): sampled steps summed as the piecewise-linear interpolant, requests leaving the
batch as they finish."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import roofline.inference as inf
from tests.roofline.models import MODELS
from tests.roofline.profiles import system


def test_sampled_decode_sums_like_every_step() -> None:
    model = MODELS["llama-3-8b"]
    run = inf.InferenceRun(model, system("h100-sxm"), inf.Workload.uniform(8, 100, 20_000), decode_samples=1 << 20)
    exact = inf.estimate_inference(run)
    sampled = inf.estimate_inference(replace(run, decode_samples=256))
    assert exact.assumptions["decode_steps_evaluated"] == 19_999
    assert sampled.assumptions["decode_steps_evaluated"] == 256
    assert sampled.decode.time_s == pytest.approx(exact.decode.time_s, rel=1e-4)
    assert (sampled.decode_first_step_s, sampled.decode_last_step_s) == (
        exact.decode_first_step_s,
        exact.decode_last_step_s,
    )
    assert exact.decode_first_step_s is not None and exact.decode_last_step_s is not None
    assert exact.decode_first_step_s < exact.decode_last_step_s  # the context grows


def test_linear_weights_sum_the_interpolant_exactly() -> None:
    # f(j) = j² sampled at 1, 3, 7: the interpolant is 1, 5, 9, 19, 29, 39, 49 at j = 1 … 7 (sum 151).
    samples = np.array([1, 3, 7])
    w = inf.linear_weights(samples)
    assert w.tolist() == [1.5, 3.0, 2.5]
    assert float(w @ samples**2) == 151.0
    assert inf.linear_weights(np.arange(1, 6)).tolist() == [1.0] * 5


def test_a_list_of_equal_requests_is_the_uniform_batch() -> None:
    model = MODELS["llama-3-8b"]
    hw = system("a100-sxm-80gb")
    uniform = inf.estimate_inference(inf.InferenceRun(model, hw, inf.Workload.uniform(3, 300, 50)))
    listed = inf.estimate_inference(
        inf.InferenceRun(model, hw, inf.Workload(np.array([300, 300, 300]), np.array([50, 50, 50])))
    )
    assert listed.total_time_s == pytest.approx(uniform.total_time_s)
    assert listed.memory.kv_cache_bytes == uniform.memory.kv_cache_bytes


def test_requests_of_different_lengths_leave_the_batch_as_they_finish() -> None:
    model = MODELS["llama-3-8b"]
    hw = system("a100-sxm-80gb")
    mixed = inf.estimate_inference(
        inf.InferenceRun(model, hw, inf.Workload(np.array([100, 4000]), np.array([10, 500])))
    )
    assert mixed.decode_steps == 499  # the longest output, less the token the prefill makes
    assert mixed.output_tokens == 510
    alone = inf.estimate_inference(inf.InferenceRun(model, hw, inf.Workload(np.array([4000]), np.array([500]))))
    # After step 9 only the long request is left: the last step is that request's alone.
    assert mixed.decode_last_step_s == pytest.approx(alone.decode_last_step_s)
    # KV cache: (100 + 10 − 1) + (4000 + 500 − 1) tokens of 2·32 layers·8 KV heads·128·2 bytes.
    assert mixed.memory.kv_cache_bytes == (109 + 4499) * 2 * 32 * 8 * 128 * 2
