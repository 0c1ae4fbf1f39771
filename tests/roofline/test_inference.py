"""Whole inference runs (roofline._inference), with numbers worked out by hand in each test.

Seed 004 (../shared/seeds/004_f1ad41962af10fb3.txt) is a calculator of one decode step's kernels; its formulas are
transcribed below as arithmetic. Model figures are the catalogue's (hardware_db/models/*.yaml).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import roofline._inference as inf
from adapters import InvalidField as Unprocessable  # what the adapters raise; the service answers 422
from adapters import to_core, topologies, transformer
from hardware_db import load_hardware, load_models
from schemas.estimates import EstimateContext, Options
from schemas.inference import AttentionKind, AttentionOverride

HARDWARE = {h.slug: h for h in load_hardware()}
MODELS = {m.slug: m for m in load_models()}


def core_hw(slug: str, **options: float) -> inf.Hardware:
    return to_core(HARDWARE[slug], EstimateContext(hardware=slug, options=Options(**options)))


def system(slug: str, **options: float) -> inf.System:
    return inf.System(core_hw(slug, **options), topologies(HARDWARE[slug]))


# Seed 004's A100: 312 TFLOP/s at GPU_EFFICIENCY 0.5 (applied to FLOP/s only), 1935 GB/s, 5 µs per kernel.
CALC_A100 = inf.System(
    replace(
        core_hw("a100-sxm-80gb", matmul_efficiency=0.5, memory_efficiency=1.0, launch_overhead_s=5e-6),
        memory_bytes_per_s=1935e9,
    )
)
SEED = transformer(MODELS["seed-calculator"], None)
BS, H, D, L = 10, 16, 768, 24  # the calculator's defaults
FP16 = inf.Precision("fp16", "fp16", "fp16")


def seed_run(kv_heads: int, prompt: int, output: int) -> inf.InferenceRun:
    """The calculator's setting: eager attention and unfused kernels, as it counts them."""
    return inf.InferenceRun(
        SEED.with_kv_heads(kv_heads), CALC_A100, inf.Workload.uniform(BS, prompt, output), precision=FP16,
        attention="naive", fused=False,
    )  # fmt: skip


def rows(phase: inf.PhaseEstimate) -> dict[str, inf.OpRow]:
    return {r.name: r for r in phase.rows}


# --- seed 004 ----------------------------------------------------------------------------------------------------


def test_seed_004_decode_kernels_are_the_calculators() -> None:
    n = 1024  # the calculator shows its kernels at the end of the sequence: 1023 cached keys and the new token
    est = inf.estimate_inference(seed_run(H, n - 1, 2))  # one decode step, attending to n keys
    assert est.decode_steps == 1
    per_kernel = {name: (r.flops / r.calls, r.bytes / r.calls) for name, r in rows(est.decode).items()}
    dh = D // H
    calculator = {  # the calculator's functions, fp16 (2 bytes)
        "qkv_projection": (2 * BS * 1 * D * 3 * D, 2 * BS * 1 * D + 2 * 3 * D * D + 2 * BS * 1 * 3 * D),
        "attention_scores": (2 * BS * H * dh * n, 2 * BS * H * dh + 2 * BS * H * n * dh + 2 * BS * H * n),
        "attention_values": (2 * BS * H * n * dh, 2 * BS * H * n + 2 * BS * H * n * dh + 2 * BS * H * dh),
        "output_projection": (2 * BS * 1 * D * D, 2 * BS * 1 * D + 2 * D * D + 2 * BS * 1 * D),
        # mlp_exec for both linear layers: d → 4d, and (the same FLOPs and bytes) 4d → d.
        "ffn_up": (2 * BS * 1 * D * 4 * D, 2 * BS * 1 * D + 2 * D * 4 * D + 2 * BS * 1 * 4 * D),
        "ffn_down": (2 * BS * 1 * D * 4 * D, 2 * BS * 1 * D + 2 * D * 4 * D + 2 * BS * 1 * 4 * D),
    }
    for name, (flops, bytes_) in calculator.items():
        assert per_kernel[name] == (flops, bytes_), name
    # MemoryUse-bound kernels: the calculator counts bytes only. Softmax reads and writes the scores once (≤ 1024
    # columns: PyTorch's one-pass softmax), as the calculator does; we also count ~5 FLOPs per score.
    assert per_kernel["softmax"] == (5 * BS * H * n, 2 * BS * H * n + 2 * BS * H * n)
    # Its layer norm reads and writes bs·d; ours also reads the scale and shift (2·d·2 bytes).
    assert per_kernel["attention_norm"][1] == 2 * BS * D + 2 * BS * D + 2 * 2 * D
    # Its "ln" kernels also stand for the residual adds (2 reads, 1 write here) and the GeLU, which is 4d wide.
    assert per_kernel["residual_add"][1] == 3 * 2 * BS * D
    assert per_kernel["activation"][1] == 2 * 2 * BS * 4 * D
    # Twelve kernels per layer, as the calculator's loop charges: qkv, scores, softmax, values, out, 2 norms,
    # 2 residual adds, GeLU, 2 linear layers.
    per_layer = [r for r in est.decode.rows if r.calls >= L]
    assert sum(r.calls for r in per_layer) == 12 * L


def test_seed_004_parameters_and_kv_cache() -> None:
    mha, mqa = inf.parameter_count(SEED), inf.parameter_count(SEED.with_kv_heads(1))
    # The calculator counts 12·L·d² (4d² attention, 8d² MLP per layer): 169 869 312 → "0.17" B, "0.34" GB in fp16.
    assert mha.attention + mha.ffn == 12 * L * D * D == 169_869_312
    assert round((mha.attention + mha.ffn) / 1e9, 3) == 0.17
    assert round(2 * (mha.attention + mha.ffn) / 1e9, 3) == 0.34
    # MQA: (10 + 2/h)·L·d².
    assert mqa.attention + mqa.ffn == pytest.approx((10 + 2 / H) * L * D * D)
    # We also count what it leaves out: the 50257 × 768 token table (tied) and 1024 × 768 learned positions, and
    # the norms' scales and shifts (2 per layer and a final one, 2·d each).
    assert mha.embedding == 50257 * D + 1024 * D
    assert mha.norms == (2 * L + 1) * 2 * D
    # KV cache at 1024 tokens, batch 10: 2·bs·L·(d/h)·h·2·n bytes (MHA), and without the ·h (MQA).
    for kv_heads, calculator_gb in ((H, 0.755), (1, 0.047)):
        est = inf.estimate_inference(seed_run(kv_heads, 1, 1024))  # 1 prompt token + 1023 fed back: 1024 tokens cached
        assert est.memory.kv_cache_bytes == 2 * BS * L * (D // H) * kv_heads * 2 * 1024
        assert round(est.memory.kv_cache_bytes / 1e9, 3) == calculator_gb


def calculator_total_ms(mqa: bool) -> float:
    """Seed 004's loop, transcribed: Σ over i = 1 … 1023 of L · (the step's kernels), each max(FLOPs / (0.5 ·
    312e12), bytes / 1935e9) in ms, floored at 0.005 ms."""
    i = np.arange(1, 1024, dtype=np.float64)
    h, d, bs = float(H), float(D), float(BS)

    def t(flop: float | np.ndarray, nbytes: float | np.ndarray) -> np.ndarray:
        return np.maximum(np.maximum(flop / (0.5 * 312e12), nbytes / 1935e9) * 1000, 0.005)

    ln = t(0, 2 * bs * d + 2 * bs * d)
    shared = (
        t(2 * bs * d * d, 2 * bs * d + 2 * d * d + 2 * bs * d) + t(0, 2 * bs * h * i + 2 * bs * h * i) + 2 * ln
        + 2 * t(2 * bs * d * 4 * d, 2 * bs * d + 2 * d * 4 * d + 2 * bs * 4 * d) + 3 * ln
    )  # fmt: skip
    if mqa:
        step = (
            shared + t(2 * bs * d * (1 + 2 / h) * d, 2 * bs * d + 2 * (2 / h) * d * d + 2 * bs * (2 / h) * d)
            + t(2 * bs * h * (d / h) * i, 2 * bs * h * (d / h) + 2 * bs * i * (d / h) + 2 * bs * h * i)
            + t(2 * bs * h * i * (d / h), 2 * bs * i * (d / h) + 2 * bs * i * (d / h) + 2 * bs * h * (d / h))
        )  # fmt: skip
    else:
        step = (
            shared + t(2 * bs * d * 3 * d, 2 * bs * d + 2 * 3 * d * d + 2 * bs * 3 * d)
            + t(2 * bs * h * (d / h) * i, 2 * bs * h * (d / h) + 2 * bs * h * i * (d / h) + 2 * bs * h * i)
            + t(2 * bs * h * i * (d / h), 2 * bs * h * i + 2 * bs * h * i * (d / h) + 2 * bs * h * (d / h))
        )  # fmt: skip
    return float(np.sum(L * step))


def test_seed_004_mha_versus_mqa() -> None:
    # The calculator: 1505.4 ms (MHA), 1473.1 ms (MQA), speed-up 1.02. Almost every kernel of a step does less
    # than 5 µs of work, and it charges max(work, 5 µs): 12 kernels × 24 layers × 1023 steps × 5 µs = 1473.1 ms,
    # all of MQA; only MHA's longest KV-cache reads rise above the floor.
    mha_calc, mqa_calc = calculator_total_ms(False), calculator_total_ms(True)
    assert mha_calc == pytest.approx(1505.4, abs=0.1)
    assert mqa_calc == pytest.approx(12 * L * 1023 * 0.005) == pytest.approx(1473.12)
    assert round(mha_calc / mqa_calc, 2) == 1.02

    # Ridgeline: a kernel costs its launch *plus* its work (the fixed cost is not hidden behind the work), so the
    # KV-cache reads MQA saves show at every context, and the total is about twice the calculator's.
    mha, mqa = inf.estimate_inference(seed_run(H, 1, 1024)), inf.estimate_inference(seed_run(1, 1, 1024))
    assert mha.decode_steps == mqa.decode_steps == 1023
    speedup = mha.decode.time_s / mqa.decode.time_s
    assert 1.15 < speedup < 1.4  # 1.25 with shipped op models
    # Every kernel of every step pays its 5 µs on top of its work (split-K products pay a second launch for the
    # reduction of their partial sums).
    assert rows(mqa.decode)["qkv_projection"].overhead_s == pytest.approx(L * 1023 * 5e-6)
    for r in mqa.decode.rows:
        assert r.overhead_s >= r.calls * 1023 * 5e-6 * (1 - 1e-9), r.name
    # All of the difference is in the three kernels MQA changes: QKV, scores and values.
    a, b = rows(mha.decode), rows(mqa.decode)
    changed = ("qkv_projection", "attention_scores", "attention_values")
    for name in a:
        if name not in changed:
            assert a[name].time_s == pytest.approx(b[name].time_s), name
    assert mha.decode.time_s - mqa.decode.time_s == pytest.approx(sum(a[n].time_s - b[n].time_s for n in changed))


# --- memory of catalogue models ----------------------------------------------------------------------------------


def test_llama_3_70b_weights_in_int8_are_about_half_of_bf16() -> None:
    model = transformer(MODELS["llama-3-70b"], None)
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
    model = transformer(MODELS["mixtral-8x7b"], None)
    d, f, layers, experts, top_k = 4096, 14336, 32, 8, 2
    params = inf.parameter_count(model)
    assert params.total == 46_702_792_704  # the checkpoint's count: all 8 experts in every layer
    assert params.ffn == layers * (experts * 3 * d * f + d * experts)  # experts and router
    assert params.active_per_token == params.total - layers * (experts - top_k) * 3 * d * f  # 12.9 B (paper: 13B)
    hw = system("h100-sxm")
    for batch in (1, 16):
        est = inf.estimate_inference(inf.InferenceRun(model, hw, inf.Workload.uniform(batch, 64, 2)))
        assert est.memory.weights_bytes == 2 * 46_702_792_704
        up = rows(est.decode)["experts_up"]  # one step: each token's k experts, gate and up (2f wide)
        # + the fused SiLU epilogue, 4 FLOPs per element of the product.
        assert up.flops == pytest.approx(layers * (2 * batch * top_k * 2 * f * d + 4 * batch * top_k * 2 * f))
        touched = experts * (1 - (1 - top_k / experts) ** batch)  # 2 for one token; 7.92 for 16
        weights_read = layers * touched * d * 2 * f * 2
        activations = layers * (batch * top_k * d + batch * top_k * f) * 2  # tokens in, act(gate)·up out (fused)
        assert up.bytes == pytest.approx(weights_read + activations)
    assert inf.touched_experts(8, 2, 1) == pytest.approx(2.0)
    assert inf.touched_experts(8, 2, 16) == pytest.approx(8 * (1 - 0.75**16))  # 7.92
    assert inf.touched_experts(256, 8, 4096) == pytest.approx(256.0)


def test_tensor_parallelism_splits_weights_and_heads_and_adds_two_all_reduces_per_layer() -> None:
    model = transformer(MODELS["llama-3-70b"], None)
    hw = system("h100-sxm")
    batch, prompt = 4, 512
    one = inf.estimate_inference(inf.InferenceRun(model, hw, inf.Workload.uniform(batch, prompt, 3)))
    four = inf.estimate_inference(
        inf.InferenceRun(model, hw, inf.Workload.uniform(batch, prompt, 3), inf.Parallelism(tensor=4))
    )
    d, layers = 8192, 80
    # Every matrix and table splits 4 ways (64 query and 8 KV heads → 16 and 2 per device); norms are replicated.
    norms = (2 * layers + 1) * d * 2
    assert four.memory.weights_bytes == pytest.approx((one.memory.weights_bytes - norms) / 4 + norms)
    assert four.memory.kv_cache_bytes == pytest.approx(one.memory.kv_cache_bytes / 4)
    qkv1, qkv4 = rows(one.prefill)["qkv_projection"], rows(four.prefill)["qkv_projection"]
    assert qkv4.flops == pytest.approx(qkv1.flops / 4)
    # Two all-reduces of the block's output per layer in the forward pass (Megatron), b·s·d·2 bytes each.
    ar = rows(four.prefill)["tensor_parallel_all_reduce"]
    assert ar.calls == 2 * layers
    assert ar.bytes == 2 * layers * batch * prompt * d * 2
    topology = topologies(HARDWARE["h100-sxm"])
    assert topology is not None
    per_call = float(inf.collective("all_reduce", batch * prompt * d * 2, topology(4)).time_s)
    assert ar.time_s == pytest.approx(2 * layers * per_call)
    assert four.prefill.communication_s["tensor_parallel"] == pytest.approx(ar.time_s)
    # Decode: one token per sequence per step, two steps.
    ar_decode = rows(four.decode)["tensor_parallel_all_reduce"]
    assert ar_decode.bytes == 2 * 2 * layers * batch * d * 2
    assert "tensor_parallel_all_reduce" not in rows(one.prefill)
    assert four.communication_s == pytest.approx(ar.time_s + ar_decode.time_s)


# --- the decode ----------------------------------------------------------------------------------------------------


def test_sampled_decode_sums_like_every_step() -> None:
    model = transformer(MODELS["llama-3-8b"], None)
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
    w = inf._linear_weights(samples)
    assert w.tolist() == [1.5, 3.0, 2.5]
    assert float(w @ samples**2) == 151.0
    assert inf._linear_weights(np.arange(1, 6)).tolist() == [1.0] * 5


def test_a_list_of_equal_requests_is_the_uniform_batch() -> None:
    model = transformer(MODELS["llama-3-8b"], None)
    hw = system("a100-sxm-80gb")
    uniform = inf.estimate_inference(inf.InferenceRun(model, hw, inf.Workload.uniform(3, 300, 50)))
    listed = inf.estimate_inference(
        inf.InferenceRun(model, hw, inf.Workload(np.array([300, 300, 300]), np.array([50, 50, 50])))
    )
    assert listed.total_time_s == pytest.approx(uniform.total_time_s)
    assert listed.memory.kv_cache_bytes == uniform.memory.kv_cache_bytes


def test_requests_of_different_lengths_leave_the_batch_as_they_finish() -> None:
    model = transformer(MODELS["llama-3-8b"], None)
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


def test_runs_evaluated_together_equal_runs_evaluated_alone() -> None:
    hw = system("h100-sxm")
    runs = [
        inf.InferenceRun(
            transformer(MODELS[slug], None), hw, inf.Workload.uniform(b, 512, 64), inf.Parallelism(tensor=t)
        )
        for slug, b, t in (("llama-3-8b", 4, 1), ("llama-3-70b", 16, 4), ("mixtral-8x7b", 8, 2), ("llama-3-8b", 8, 2))
    ]
    together = inf.estimate_inferences(runs)
    for run, est in zip(runs, together, strict=True):
        alone = inf.estimate_inference(run)
        assert est.total_time_s == pytest.approx(alone.total_time_s, rel=1e-12)
        assert [r.time_s for r in est.decode.rows] == pytest.approx([r.time_s for r in alone.decode.rows], rel=1e-12)


def test_totals_are_the_sum_of_their_parts() -> None:
    model = transformer(MODELS["llama-3-70b"], None)
    est = inf.estimate_inference(
        inf.InferenceRun(model, system("h100-sxm"), inf.Workload.uniform(8, 1024, 128), inf.Parallelism(4))
    )
    assert est.total_time_s == est.prefill.time_s + est.decode.time_s
    for phase in (est.prefill, est.decode):
        assert sum(r.time_s for r in phase.rows) == pytest.approx(phase.time_s)
    assert est.decode_mean_step_s == pytest.approx(est.decode.time_s / 127)


def test_fused_kernels_are_fewer_and_faster() -> None:
    model = transformer(MODELS["llama-3-8b"], None)
    run = inf.InferenceRun(model, system("h100-sxm"), inf.Workload.uniform(8, 1024, 16))
    fused, unfused = inf.estimate_inference(run), inf.estimate_inference(replace(run, fused=False))
    calls = lambda e: sum(r.calls for r in e.decode.rows)  # noqa: E731
    assert calls(unfused) - calls(fused) == 32 * 4  # per layer: rotary, activation and two residual adds
    assert fused.total_time_s < unfused.total_time_s


# --- pipeline, memory limits, windows ----------------------------------------------------------------------------


def test_pipeline_prefill_is_m_plus_p_minus_1_stage_times() -> None:
    model = transformer(MODELS["llama-3-70b"], None)
    hw = system("h100-sxm")
    wl = inf.Workload.uniform(8, 512, 2)
    est = inf.estimate_inference(
        inf.InferenceRun(model, hw, wl, inf.Parallelism(tensor=2, pipeline=4, micro_batches=4))
    )
    assert est.pipeline_bubble_fraction == pytest.approx(3 / 7)  # (p − 1)/(m + p − 1), GPipe
    r = rows(est.prefill)
    work = sum(row.time_s for name, row in r.items() if name not in ("pipeline_bubble", "pipeline_send"))
    tau = work / 4  # each device runs its quarter of the layers for each of the 4 micro-batches
    assert r["pipeline_bubble"].time_s == pytest.approx(3 * tau)
    assert est.prefill.time_s == pytest.approx((4 + 4 - 1) * tau + r["pipeline_send"].time_s)
    assert r["pipeline_send"].calls == 3
    # Weights: 80 layers over 4 stages (20 each), the LM head on the last; all split 2 ways.
    alone = inf.estimate_inference(inf.InferenceRun(model, hw, wl, inf.Parallelism(tensor=2)))
    assert est.memory.weights_bytes < alone.memory.weights_bytes / 3.5


def test_the_largest_batch_that_fits_fits_and_one_more_does_not() -> None:
    model = transformer(MODELS["llama-3-8b"], None)
    hw = system("l4")
    est = inf.estimate_inference(inf.InferenceRun(model, hw, inf.Workload.uniform(1, 4096, 1024)))
    best = est.max_batch_that_fits
    assert best > 0
    fits = inf.estimate_inference(inf.InferenceRun(model, hw, inf.Workload.uniform(best, 4096, 1024)))
    over = inf.estimate_inference(inf.InferenceRun(model, hw, inf.Workload.uniform(best + 1, 4096, 1024)))
    assert fits.memory.fits and not over.memory.fits


def test_a_sliding_window_caps_the_kv_cache_of_its_layers() -> None:
    spec = MODELS["mistral-7b"]
    model = transformer(spec, None)
    assert spec.sliding_window_tokens == 4096 and model.window_layers == spec.layers
    short = inf.estimate_inference(inf.InferenceRun(model, system("h100-sxm"), inf.Workload.uniform(1, 2000, 97)))
    long = inf.estimate_inference(inf.InferenceRun(model, system("h100-sxm"), inf.Workload.uniform(1, 20000, 97)))
    per_token = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16
    assert short.memory.kv_cache_bytes == 2096 * per_token
    assert long.memory.kv_cache_bytes == 4096 * per_token


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"parallelism": inf.Parallelism(tensor=3)}, "parallelism.tensor"),
        ({"parallelism": inf.Parallelism(tensor=16)}, "parallelism.tensor"),
        ({"parallelism": inf.Parallelism(expert=2)}, "parallelism.expert"),
        ({"parallelism": inf.Parallelism(pipeline=81)}, "parallelism.pipeline"),
        ({"precision": inf.Precision("bf16", "fp8", "bf16")}, "dtypes.activations"),
        ({"attention": "sparse"}, "implementation.attention"),
    ],
)
def test_runs_that_cannot_be_built_name_the_input(change: dict[str, object], field: str) -> None:
    run = inf.InferenceRun(
        transformer(MODELS["llama-3-70b"], None), system("a100-sxm-80gb"), inf.Workload.uniform(1, 8, 2)
    )
    with pytest.raises(inf.InferenceConfigError) as err:
        inf.estimate_inferences([run, replace(run, **change)])  # type: ignore[arg-type]
    assert err.value.field == field
    assert err.value.index == 1


def test_deepseek_v3_latent_attention_caches_a_576_value_latent() -> None:
    # Shapes from the config (hardware_db/models/deepseek-v3.yaml): d 7168, 128 heads, q_lora 1536, kv_lora 512,
    # rope 64, nope 128, v 128; 61 layers (3 dense, 58 MoE of 256 experts of 2048, top-8, 1 shared).
    model = transformer(MODELS["deepseek-v3"], None)
    assert model.mla is not None and model.mla.latent == 576
    d, h = 7168, 128
    attention = (d * 1536 + 1536) + 1536 * h * 192 + (d * 576 + 512) + 512 * h * 256 + h * 128 * d
    assert attention == 187_107_328  # the config notes' "about 187 M" per layer
    params = inf.parameter_count(model)
    assert params.attention == 61 * attention
    assert round(params.total / 1e9, 1) == 671.0  # the paper's 671B
    assert round(params.active_per_token / 1e9, 1) == 37.6  # the paper's 37B activated (embeddings included)
    run = inf.InferenceRun(
        model, system("h200-sxm"), inf.Workload.uniform(4, 1023, 2), inf.Parallelism(tensor=8),
        inf.Precision("fp8", "bf16", "bf16"),
    )  # fmt: skip
    est = inf.estimate_inference(run)
    # 576 bf16 values per token and layer, whole on every device of the tensor group: 70 272 bytes per token.
    assert est.memory.kv_cache_bytes == 4 * 1024 * 61 * 576 * 2
    decode = rows(est.decode)
    # Absorbed decode (one step at 1024 keys): the 16 heads of a device attend over the latent as one MQA head of
    # (576 + 512)/2 dimensions, reading each cached latent once; queries and outputs of 544 bf16 values per head.
    assert {"q_absorb", "v_absorb", "attention"} <= set(decode) and "kv_up_projection" not in decode
    latent_bytes = 4 * 1024 * 576 * 2
    q_and_o = 2 * 4 * 16 * 544 * 2
    assert decode["attention"].bytes == pytest.approx(61 * (latent_bytes + q_and_o))
    assert decode["attention"].flops >= 61 * 4 * 4 * 16 * 1024 * 544  # two products of 2·b·h·kv·d_eff
    assert "kv_up_projection" in rows(est.prefill)  # the prefill projects the latent up and attends as MHA
    with pytest.raises(Unprocessable, match="multi-head latent attention"):
        transformer(MODELS["deepseek-v3"], AttentionOverride(kind=AttentionKind.mqa))


# --- corrections (calibration) -----------------------------------------------------------------------------------


def test_a_corrector_sees_every_op_group_once_and_its_times_are_what_is_summed() -> None:
    """A corrector that doubles every op's and collective's time: the pipeline timeline is homogeneous in the op
    times (max(m·τ, p·(τ + send)), (m + p − 1)·τ + (p − 1)·send), so every phase, row, step and communication figure
    doubles exactly, and the raw figures are the uncorrected run's."""
    seen: list[inf.OpGroup] = []

    def double(group: inf.OpGroup) -> inf.Corrected:
        seen.append(group)
        assert group.work_s.shape == group.time_s.shape and np.all(group.work_s <= group.time_s)
        return inf.Corrected(2 * group.time_s, np.ones(group.time_s.size, dtype=np.int64), f"x2 {group.op}")

    model = transformer(MODELS["llama-3-70b"], None)
    plain = system("h100-sxm")
    doubled = replace(plain, correct=double)
    wl = inf.Workload(np.array([512, 300]), np.array([40, 9]), np.array([5, 3]))  # two kinds of request
    par = inf.Parallelism(tensor=2, pipeline=4, micro_batches=4)
    raw, got = (
        inf.estimate_inference(inf.InferenceRun(model, s, wl, par, decode_samples=16)) for s in (plain, doubled)
    )
    # One call per group of alike ops (not per layer or step): a few dozen, collectives included.
    assert 0 < len(seen) < 40 and {g.op for g in seen} >= {"matmul", "attention", "layernorm", "collective"}
    reduce = next(g for g in seen if g.op == "collective" and g.static["collective"] == "all_reduce")
    assert reduce.static == {"collective": "all_reduce", "devices": 2, "dtype": "bf16"}
    for phase in ("prefill", "decode"):
        a, b = getattr(raw, phase), getattr(got, phase)
        assert b.time_s == pytest.approx(2 * a.time_s, rel=1e-12) and b.raw_time_s == pytest.approx(a.time_s)
        assert a.raw_time_s is None
        for name, row in rows(b).items():
            assert row.time_s == pytest.approx(2 * rows(a)[name].time_s, rel=1e-12), (phase, name)
            assert row.raw_time_s == pytest.approx(rows(a)[name].time_s, rel=1e-12), (phase, name)
            if name not in ("pipeline_send", "pipeline_bubble"):
                assert row.corrections and all(m == 1 and label.startswith("x2 ") for label, m in row.corrections)
        assert b.communication_s["tensor_parallel"] == pytest.approx(2 * a.communication_s["tensor_parallel"])
    assert got.decode_mean_step_s == pytest.approx(2 * (raw.decode_mean_step_s or 0.0), rel=1e-12)
