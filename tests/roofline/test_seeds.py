"""The phenomena of the seed course (../shared/seeds), reproduced by the core with numbers worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

import roofline as rl

# The seeds' devices are ideal: every stream, a product's operands too, at the full bandwidth.
# The seeds' own A100: 312 TFLOP/s bf16, 108 SMs, 256×128 tiles (seed 002), 1935 GB/s (seed 004).
A100 = rl.Hardware(
    name="seed A100", units=108, matrix_flops_per_s={"bf16": 312e12, "fp16": 312e12},
    vector_flops_per_s={"fp32": 19.5e12}, memory_bytes_per_s=1935e9, memory_capacity_bytes=80e9, launch_s=0.0,
    eff_matmul=1.0, eff_vector=1.0, eff_memory=1.0, cache_bytes=40e6, local_bytes_per_unit=164e3,
    tiles=((256, 128),), matmul_stream_efficiency=1.0,
)  # fmt: skip

# A device so fast at math that every op below is memory-bound: the seed 000 exercise assumes that regime.
MEMORY_BOUND = rl.Hardware(
    name="memory-bound", units=1000, matrix_flops_per_s={"bf16": 1e18}, vector_flops_per_s={"fp32": 1e18},
    memory_bytes_per_s=1e12, memory_capacity_bytes=1e12, launch_s=0.0, eff_matmul=1.0, eff_vector=1.0,
    eff_memory=1.0, tiles=((128, 128),), matmul_stream_efficiency=1.0,
)  # fmt: skip


def run(kernels: list[rl.Kernel], hw: rl.Hardware = A100) -> rl.Estimate:
    return rl.single(kernels, hw, hw.vector_peak("bf16"), hw.launch_s)


def one(x: object) -> float:
    return float(np.asarray(x))


# Seed 000, exercise 1: relu(A @ B), N × N, bf16.
@pytest.mark.parametrize("n", [1024, 4096])
def test_relu_matmul_fused_moves_6n2_bytes_unfused_10n2(n: int) -> None:
    fused = run(rl.matmul(MEMORY_BOUND, n, n, n, epilogue=("relu",), fuse_epilogue=True), MEMORY_BOUND)
    unfused = run(rl.matmul(MEMORY_BOUND, n, n, n, epilogue=("relu",), fuse_epilogue=False), MEMORY_BOUND)
    assert one(fused.bytes) == 6 * n * n  # read A and B (2·2N²), write C (2N²)
    assert one(unfused.bytes) == 10 * n * n  # + relu reads C and writes it again (4N²)
    assert one(fused.time_s) / one(unfused.time_s) == pytest.approx(0.6)  # memory-bound: time ∝ bytes


# Seed 000, exercise 2: C @ relu(A @ B), KV_HEAD 128, SEQUENCE 10 000, bf16.
def test_c_relu_ab_fused_intensity_and_the_spilled_intermediate() -> None:
    kv_head, seq = 128, 10_000
    chain = [
        rl.matmul(A100, seq, seq, kv_head),  # A[S, KVH] @ B[KVH, S]
        rl.activation(A100, seq * seq, "relu"),
        rl.matmul(A100, kv_head, seq, seq),  # C[KVH, S] @ X[S, S]: X is the B operand
    ]
    est = rl.chain(chain, A100, fused=True, vector_peak=A100.vector_peak("bf16"), launch_s=0.0)
    matmul_flops = 4 * kv_head * seq**2
    assert matmul_flops == 5.12e10
    assert one(est.flops) == matmul_flops + seq**2  # plus one max() per element of the relu
    ideal = one(est.extra["ideal_bytes"])
    assert ideal == 8 * kv_head * seq == 10.24e6  # three inputs and the output, 2·KVH·S bytes each
    assert matmul_flops / ideal == seq / 2 == 5000
    # The S×S intermediate (200 MB) outgrows the A100's ~58 MB of L2 + shared memory: written and read back.
    assert one(est.extra["spilled_bytes"]) == 4 * seq**2
    assert one(est.bytes) == 10.24e6 + 4 * seq**2
    assert matmul_flops / one(est.bytes) == pytest.approx(124.8, abs=0.1)  # ≈ KV_HEAD


# Seed 001: attention, naive (scores through HBM) versus fused (flash).
@pytest.mark.parametrize("seq", [8192, 16384])
def test_attention_intensity_naive_about_head_dim_flash_about_half_the_sequence(seq: int) -> None:
    d = 128
    naive = run(rl.attention(A100, 1, 1, 1, d, seq, seq, causal=False, implementation="naive"))
    flash = run(rl.attention(A100, 1, 1, 1, d, seq, seq, causal=False, implementation="flash"))
    matmul_flops = 4 * seq * seq * d  # two products of 2·S²·d
    softmax_flops = 5 * seq * seq
    assert one(naive.flops) == one(flash.flops) == matmul_flops + softmax_flops
    # Naive: Q, K, V, O (4·S·d·2 bytes) + the S² scores (≥ 134 MB, more than the A100 holds on chip) written once
    # and read once (2·2·S²).
    assert one(naive.bytes) == 8 * seq * d + 4 * seq * seq
    assert matmul_flops / one(naive.bytes) == pytest.approx(d, rel=0.07)
    # Flash: K and V of one head (2·S·d·2 bytes ≤ 8 MB) fit in L2, so Q, K, V and O move once: 8·S·d bytes.
    assert one(flash.bytes) == 8 * seq * d
    assert matmul_flops / one(flash.bytes) == seq / 2


def test_scores_that_fit_on_chip_never_reach_hbm_in_a_per_head_fused_kernel_but_always_do_in_naive() -> None:
    tpu_like = rl.Hardware(
        name="160 MB on chip", units=1, matrix_flops_per_s={"bf16": 275e12}, vector_flops_per_s={"fp32": 4e12},
        memory_bytes_per_s=1.2e12, memory_capacity_bytes=32e9, launch_s=0.0, eff_matmul=1.0, eff_vector=1.0,
        eff_memory=1.0, cache_bytes=160e6,
    )  # fmt: skip
    small = rl.attention(tpu_like, 1, 1, 1, 128, 2048, 2048, causal=False, implementation="fused_per_head")
    large = rl.attention(tpu_like, 1, 1, 1, 128, 16384, 16384, causal=False, implementation="fused_per_head")
    assert one(small[0].extra["score_bytes"]) == 2 * 2048**2 == 8_388_608  # 8.4 MB: fits in 160 MB
    assert one(small[0].extra["scores_fit_on_chip"]) == 1.0
    assert one(large[0].extra["score_bytes"]) == 2 * 16384**2 == 536_870_912  # 537 MB: does not
    assert one(large[0].extra["scores_fit_on_chip"]) == 0.0
    assert one(run(small, tpu_like).bytes) == 8 * 2048 * 128  # Q, K, V, O only
    assert one(run(large, tpu_like).bytes) == 8 * 16384 * 128 + 4 * 16384**2  # the scores written and read back
    # Naive's two kernels each run over every head: the scores go to device memory even when one head's would fit.
    naive = rl.attention(tpu_like, 1, 1, 1, 128, 2048, 2048, causal=False, implementation="naive")
    assert one(naive[0].extra["scores_fit_on_chip"]) == 0.0
    assert one(run(naive, tpu_like).bytes) == 8 * 2048 * 128 + 4 * 2048**2


def test_causal_flash_skips_the_masked_half() -> None:
    seq, d = 8192, 128
    full = run(rl.attention(A100, 1, 1, 1, d, seq, seq, causal=False))
    causal = run(rl.attention(A100, 1, 1, 1, d, seq, seq, causal=True))
    kept = seq * (seq + 1) / 2  # pairs on and below the diagonal
    assert one(causal.flops) == pytest.approx((4 * d + 5) * kept)
    assert one(causal.flops) / one(full.flops) == pytest.approx(0.5, rel=1e-3)


def test_gqa_and_mqa_divide_the_kv_traffic_of_decode() -> None:
    # One query token against 4096 cached tokens: memory-bound reads of the KV cache (Shazeer 2019).
    mha = run(rl.attention(A100, 8, 32, 32, 128, 1, 4096))
    gqa = run(rl.attention(A100, 8, 32, 8, 128, 1, 4096))
    mqa = run(rl.attention(A100, 8, 32, 1, 128, 1, 4096))
    kv = lambda kv_heads: 2 * 2 * 8 * kv_heads * 4096 * 128  # noqa: E731 - K and V, bf16
    q_and_o = 2 * 2 * 8 * 32 * 128
    assert [one(e.bytes) for e in (mha, gqa, mqa)] == [kv(32) + q_and_o, kv(8) + q_and_o, kv(1) + q_and_o]


# Seed 002: tile and wave quantization on the A100 (108 SMs, 256×128 tiles).
def test_1792_is_one_wave_1793_is_two() -> None:
    aligned = run(rl.matmul(A100, 1792, 1792, 1792, tile=(256, 128)))
    ragged = run(rl.matmul(A100, 1793, 1793, 1793, tile=(256, 128)))
    assert (one(aligned.extra["tiles"]), one(aligned.extra["waves"])) == (98, 1)  # 7 × 14 tiles
    assert (one(ragged.extra["tiles"]), one(ragged.extra["waves"])) == (120, 2)  # 8 × 15 tiles
    throughput = lambda e: one(e.flops) / one(e.time_s)  # noqa: E731
    # Two waves take twice one wave's time for 1.0017³ of the work: throughput at least halves.
    assert throughput(ragged) < 0.51 * throughput(aligned)
    # One wave: every SM computes a 256×128×1792 tile at 312/108 TFLOP/s.
    assert one(aligned.compute_s) == pytest.approx(2 * 256 * 128 * 1792 / (312e12 / 108))


def test_padding_the_vocabulary_to_a_multiple_of_64_makes_the_lm_head_faster() -> None:
    # nanoGPT: logits[B·T, vocab] = x[B·T, 768] · Wᵀ; 50257 is odd, 50304 = 64 × 786.
    tokens, d = 8 * 1024, 768
    odd = run(rl.matmul(A100, tokens, 50257, d))
    padded = run(rl.matmul(A100, tokens, 50304, d))
    assert one(padded.flops) > one(odd.flops)
    assert one(padded.time_s) < one(odd.time_s)


def test_recomputing_three_sigmoids_moves_five_eighths_of_the_bytes() -> None:
    n = 1 << 20
    # Stored: forward reads x, writes s1, s2, out; backward reads dout, s1, s2 and writes dx.
    stored = run(rl.elementwise(A100, n, 1, 3, 9, 3) + rl.elementwise(A100, n, 3, 1, 6, 0))
    # Recomputed: forward reads x, writes out; backward reads dout and x, recomputes the sigmoids, writes dx.
    recomputed = run(rl.elementwise(A100, n, 1, 1, 9, 3) + rl.elementwise(A100, n, 2, 1, 15, 3))
    assert one(stored.bytes) == 8 * 2 * n and one(recomputed.bytes) == 5 * 2 * n
    assert one(recomputed.bytes) / one(stored.bytes) == 5 / 8
    assert one(recomputed.flops) > one(stored.flops)  # the price: the sigmoids again


def test_sin2_plus_cos2_fused_moves_one_kernels_traffic_instead_of_five() -> None:
    n = 1 << 24
    ops = [
        rl.elementwise(A100, n, 1, 1, 1, 1),  # sin x
        rl.elementwise(A100, n, 1, 1, 1, 0),  # square
        rl.elementwise(A100, n, 1, 1, 1, 1, chained_inputs=1),  # cos x: x is already on chip
        rl.elementwise(A100, n, 1, 1, 1, 0),  # square
        rl.elementwise(A100, n, 2, 1, 1, 0, chained_inputs=2),  # add the two intermediates
    ]
    vp = A100.vector_peak("bf16")
    fused = rl.chain(ops, A100, fused=True, vector_peak=vp, launch_s=5e-6)
    unfused = rl.chain(ops, A100, fused=False, vector_peak=vp, launch_s=5e-6)
    assert one(fused.bytes) == 2 * 2 * n  # read x, write the result
    assert one(unfused.bytes) == (2 + 2 + 2 + 2 + 3) * 2 * n  # every kernel reads and writes HBM
    assert fused.assumptions["kernels"] == 1 and unfused.assumptions["kernels"] == 5
    assert one(unfused.overhead_s) == 5 * one(fused.overhead_s)


def test_softmax_online_reads_once_multipass_three_times() -> None:
    rows, cols = 4096, 4096
    online = run(rl.softmax(A100, rows, cols, online=True))
    multipass = run(rl.softmax(A100, rows, cols, online=False))
    assert one(online.bytes) == 2 * 2 * rows * cols
    assert one(multipass.bytes) == 4 * 2 * rows * cols


def test_mixed_precision_writes_fp32_and_fp8_needs_hardware_that_has_it() -> None:
    bf16_out = run(rl.matmul(A100, 4096, 4096, 4096))
    fp32_out = run(rl.matmul(A100, 4096, 4096, 4096, out_dtype="fp32"))
    assert one(fp32_out.bytes) - one(bf16_out.bytes) == 2 * 4096 * 4096
    with pytest.raises(ValueError, match="no fp8 peak"):
        rl.matmul(A100, 16, 16, 16, dtype="fp8")


# Seed 004: one decode step of the MHA-vs-MQA calculator (batch 10, 16 heads, d 768, fp16), per kernel.
BS, H, D, N = 10, 16, 768, 512
DH = D // H


@pytest.mark.parametrize(
    ("name", "kernel", "calc_flops", "calc_bytes"),
    [
        ("qkv", lambda: rl.matmul(A100, BS, 3 * D, D, dtype="fp16"),
         2 * BS * D * 3 * D, 2 * BS * D + 2 * 3 * D * D + 2 * BS * 3 * D),
        ("att1 (QKᵀ)", lambda: rl.matmul(A100, 1, N, DH, batch=BS * H, dtype="fp16"),
         2 * BS * H * DH * N, 2 * BS * H * DH + 2 * BS * H * N * DH + 2 * BS * H * N),
        ("att2 (PV)", lambda: rl.matmul(A100, 1, DH, N, batch=BS * H, dtype="fp16"),
         2 * BS * H * N * DH, 2 * BS * H * N + 2 * BS * H * N * DH + 2 * BS * H * DH),
        ("out", lambda: rl.matmul(A100, BS, D, D, dtype="fp16"), 2 * BS * D * D, 2 * BS * D + 2 * D * D + 2 * BS * D),
        ("mlp", lambda: rl.matmul(A100, BS, 4 * D, D, dtype="fp16"),
         2 * BS * D * 4 * D, 2 * BS * D + 2 * D * 4 * D + 2 * BS * 4 * D),
    ],
)  # fmt: skip
def test_calculator_decode_matmuls_mha(name: str, kernel: object, calc_flops: int, calc_bytes: int) -> None:
    est = run(kernel())  # type: ignore[operator]
    assert one(est.flops) == calc_flops, name
    assert one(est.bytes) == calc_bytes, name


def test_calculator_softmax_and_layernorm_bytes() -> None:
    softmax = run(rl.softmax(A100, BS * H, N, dtype="fp16"))
    assert one(softmax.bytes) == 2 * BS * H * N + 2 * BS * H * N
    layernorm = run(rl.layernorm(A100, BS, D, dtype="fp16"))
    # The calculator counts x read and y written; we also read the scale and shift vectors (2·d·2 bytes).
    assert one(layernorm.bytes) == (2 * BS * D + 2 * BS * D) + 2 * 2 * D
    # It counts no FLOPs for either; we count ~5 per score and ~8 per normalised element (memory-bound anyway).
    assert one(softmax.memory_s) > one(softmax.compute_s)


def test_calculator_mqa_kernels_and_where_its_formulas_are_wrong() -> None:
    # QKV with one shared K/V head: n = d + 2·d/h. FLOPs match the calculator's 2·bs·d·(1 + 2/h)·d …
    qkv = run(rl.matmul(A100, BS, D + 2 * DH, D, dtype="fp16"))
    assert one(qkv.flops) == pytest.approx(2 * BS * D * (1 + 2 / H) * D)
    # … but its bytes, 2·bs·d + 2·(2/h)·d² + 2·bs·(2/h)·d, leave out the query projection's weights (2·d²) and
    # its output (2·bs·d).
    calc = 2 * BS * D + 2 * (2 / H) * D * D + 2 * BS * (2 / H) * D
    assert one(qkv.bytes) == pytest.approx(calc + 2 * D * D + 2 * BS * D)
    # Scores with MQA: all h query rows of a sequence against one K: batch bs, m = h.
    att1 = run(rl.matmul(A100, H, N, DH, batch=BS, dtype="fp16"))
    assert one(att1.bytes) == 2 * BS * H * DH + 2 * BS * N * DH + 2 * BS * H * N  # the calculator's formula
    att2 = run(rl.matmul(A100, H, DH, N, batch=BS, dtype="fp16"))
    # The calculator reads 2·bs·n·(d/h) for the probabilities; they are bs·h·n elements (2·bs·h·n bytes).
    assert one(att2.bytes) == 2 * BS * H * N + 2 * BS * N * DH + 2 * BS * H * DH
