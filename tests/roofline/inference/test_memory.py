"""Parameters and memory on the busiest device (`roofline.inference`): weights by storage type, every expert held,
the KV cache of windowed layers, and the largest batch that fits; numbers worked out by hand from the models'
configs (tests/roofline/models.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import roofline.inference as inf
from tests.roofline.inference import rows
from tests.roofline.models import MODELS
from tests.roofline.profiles import system


def test_llama_3_70b_weights_in_int8_are_about_half_of_bf16() -> None:
    model = MODELS["llama-3-70b"]
    run = inf.InferenceRun(model, system("h100-sxm"), inf.Workload.uniform(1, 128, 2))
    d, f, layers, vocab = 8192, 28672, 80, 128256
    matrices = layers * (d * (64 + 2 * 8) * 128 + 64 * 128 * d + 3 * d * f)  # QKV, output, gate/up/down
    assert matrices == 68_451_041_280
    tables, norms = 2 * vocab * d, (2 * layers + 1) * d  # untied embedding and LM head; RMS norm scales
    assert matrices + tables + norms == 70_553_706_496  # the checkpoint's count (model card: 70.6B)
    bf16 = inf.estimate_inference(run).memory.weights_bytes
    int8 = inf.estimate_inference(replace(run, precision=inf.Precision("int8", "bf16", "bf16"))).memory.weights_bytes
    assert bf16 == 2 * 70_553_706_496  # 141.1 GB: more than one 80 GB device holds
    assert int8 == matrices + 2 * (tables + norms)  # tables and norms stay 16-bit: 72.7 GB
    assert int8 / bf16 == pytest.approx(0.515, abs=0.001)


def test_mixtral_memory_counts_every_expert_flops_top_k_and_decode_reads_touched_experts() -> None:
    model = MODELS["mixtral-8x7b"]
    d, f, layers, experts, top_k = 4096, 14336, 32, 8, 2
    params = inf.parameter_count(model)
    assert params.total == 46_702_792_704  # the checkpoint's count: all 8 experts in every layer
    assert params.ffn == layers * (experts * 3 * d * f + d * experts)  # experts and router
    assert params.active_per_token == params.total - layers * (experts - top_k) * 3 * d * f  # 12.9 B (paper: 13B)
    hw = system("h100-sxm")
    for batch in (1, 16):
        est = inf.estimate_inference(inf.InferenceRun(model, hw, inf.Workload.uniform(batch, 64, 2)))
        assert est.memory.weights_bytes == 2 * 46_702_792_704
        moe = rows(est.decode)["experts"]  # one step: the fused MoE's seven kernels on an H100 (roofline.ops.moe)
        t, pairs = batch, batch * top_k  # tokens, token-expert pairs
        touched = experts * (1 - (1 - top_k / experts) ** batch)  # 2 for one token; 7.92 for 16
        flops = (
            2 * t * experts  # routing: top-k over each token's logits
            + pairs * d  # expand: one per copied element
            + 2 * pairs * 2 * f * d  # gate and up, 2f wide
            + 4 * pairs * f  # SiLU(gate) · up
            + 2 * pairs * f * d  # down
            + 2 * top_k * t * d  # finalize: k weighted outputs per token
        )
        assert moe.flops == pytest.approx(layers * flops)
        moved = (
            4 * t * experts + 8 * t * top_k  # routing: fp32 logits in; ids and weights out
            + 2 * (2 * pairs * d)  # expand: rows in, rows out (bf16)
            + 8 * (experts + 1) + 2 * 128 * experts  # TMA grouped GEMMs' set-up: offsets in, two layouts out
            + 2 * (pairs * d + touched * d * 2 * f + pairs * 2 * f)  # gate/up: tokens, touched experts' weights, out
            + 2 * (2 * pairs * f + pairs * f)  # activation: gate and up in, product out
            + 2 * (pairs * f + touched * f * d + pairs * d)  # down
            + 2 * (pairs * d + t * d)  # finalize
        )  # fmt: skip
        assert moe.bytes == pytest.approx(layers * moved)
    assert inf.touched_experts(8, 2, 1) == pytest.approx(2.0)
    assert inf.touched_experts(8, 2, 16) == pytest.approx(8 * (1 - 0.75**16))  # 7.92
    assert inf.touched_experts(256, 8, 4096) == pytest.approx(256.0)


def test_a_sliding_window_caps_the_kv_cache_of_its_layers() -> None:
    model = MODELS["mistral-7b"]
    assert model.window == 4096 and model.window_layers == model.layers
    short = inf.estimate_inference(inf.InferenceRun(model, system("h100-sxm"), inf.Workload.uniform(1, 2000, 97)))
    long = inf.estimate_inference(inf.InferenceRun(model, system("h100-sxm"), inf.Workload.uniform(1, 20000, 97)))
    per_token = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16
    assert short.memory.kv_cache_bytes == 2096 * per_token
    assert long.memory.kv_cache_bytes == 4096 * per_token


def test_the_largest_batch_that_fits_fits_and_one_more_does_not() -> None:
    model = MODELS["llama-3-8b"]
    hw = system("l4")
    est = inf.estimate_inference(inf.InferenceRun(model, hw, inf.Workload.uniform(1, 4096, 1024)))
    best = est.max_batch_that_fits
    assert best > 0
    fits = inf.estimate_inference(inf.InferenceRun(model, hw, inf.Workload.uniform(best, 4096, 1024)))
    over = inf.estimate_inference(inf.InferenceRun(model, hw, inf.Workload.uniform(best + 1, 4096, 1024)))
    assert fits.memory.fits and not over.memory.fits
