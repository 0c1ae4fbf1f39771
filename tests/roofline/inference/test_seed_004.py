"""Seed 004 (../shared/seeds/004_f1ad41962af10fb3.txt), a calculator of one decode step's kernels, reproduced kernel
by kernel (`roofline.inference`); its formulas are transcribed below as arithmetic."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import roofline.inference as inf
from tests.roofline.inference import rows
from tests.roofline.models import MODELS
from tests.roofline.profiles import A100

# Seed 004's A100: 312 TFLOP/s at GPU_EFFICIENCY 0.5 (applied to FLOP/s only), 1935 GB/s, 5 µs per kernel.
CALC_A100 = inf.System(replace(A100, eff_matmul=0.5, eff_memory=1.0, launch_s=5e-6, memory_bytes_per_s=1935e9))
SEED = MODELS["seed-calculator"]
BS, H, D, L = 10, 16, 768, 24  # the calculator's defaults
FP16 = inf.Precision("fp16", "fp16", "fp16")


def seed_run(kv_heads: int, prompt: int, output: int) -> inf.InferenceRun:
    """The calculator's setting: eager attention and unfused kernels, as it counts them."""
    return inf.InferenceRun(
        SEED.with_kv_heads(kv_heads), CALC_A100, inf.Workload.uniform(BS, prompt, output), precision=FP16,
        attention="naive", fused=False,
    )  # fmt: skip


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
