"""A MoE layer as a fused MoE runs it (`roofline.moe`): its six kernels (seven where the grouped GEMMs are TMA
warp-specialised), the routed pairs, the weights it reads, the routing's balance, worked by hand on the H100 profile
(tests/roofline/profiles.py)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

import roofline
from roofline.ops import rank_load
from tests.roofline.profiles import A100, H100

FP4 = replace(H100, matrix_flops_per_s={**H100.matrix_flops_per_s, "fp4": 4 * 989e12})


def test_a_balanced_layer_runs_seven_kernels_over_the_pairs_routed_to_this_device() -> None:
    """1 024 tokens, top-8 of 256 experts over 8 devices (32 local experts), hidden 7 168, expert width 2 048 split
    over 2 devices: 1 024 · 8 / 8 = 1 024 pairs here, 32 per local expert, every local expert touched. An H100's
    grouped GEMMs are TMA warp-specialised: a set-up kernel reads the 33 expert offsets (8 B each) and writes both
    GEMMs' layouts, 2 × 128 B per local expert."""
    t, h, i, k, e, tp, ep = 1024.0, 7168.0, 2048.0, 8.0, 256.0, 2.0, 8.0
    routing, expand, setup, up, act, down, finalize = roofline.moe(H100, t, h, i, k, e, tp, ep, routing="balanced")
    pairs, width, touched = 1024.0, 1024.0, 32.0
    assert float(setup.chained_in_bytes) == 8 * 33 and float(setup.out_bytes) == 2 * 128 * 32
    assert float(routing.chained_in_bytes) == 4 * t * e and float(routing.out_bytes) == 8 * t * k
    assert float(expand.chained_in_bytes) == float(expand.out_bytes) == 2 * pairs * h
    assert float(up.flops) == 2 * pairs * 2 * width * h  # gate and up
    assert float(up.external_in_bytes) == 2 * (pairs * h + touched * h * 2 * width)  # tokens, the experts' weights
    # a grouped GEMM: every touched expert's 32 rows in tiles, all scheduled together
    tm, tn = float(up.extra["tile_m"]), float(up.extra["tile_n"])
    assert float(up.extra["tiles"]) == touched * math.ceil(32 / tm) * math.ceil(2 * width / tn) * float(
        up.extra["split_k"]
    )
    assert float(act.chained_in_bytes) == 2 * 2 * pairs * width and float(act.out_bytes) == 2 * pairs * width
    assert float(down.flops) == 2 * pairs * width * h
    assert float(down.external_in_bytes) == 2 * (pairs * width + touched * width * h)
    assert float(finalize.chained_in_bytes) == 2 * pairs * h and float(finalize.out_bytes) == 2 * t * h


def test_uniform_routing_touches_the_expected_experts() -> None:
    """4 tokens, top-2 of 8 experts on one device: 8 · (1 − (6/8)^4) = 5.47 experts touched, 8 pairs."""
    *_, up, _, _, _ = roofline.moe(H100, 4.0, 4096.0, 14336.0, 2.0, 8.0)
    assert len(roofline.moe(A100, 4.0, 4096.0, 14336.0, 2.0, 8.0)) == 6  # Ampere's grouped GEMM: no set-up kernel
    touched = 8 * (1 - 0.75**4)
    assert float(up.extra["b_bytes"]) == pytest.approx(2 * touched * 4096 * 2 * 14336)
    assert float(up.flops) == pytest.approx(2 * 8 * 2 * 14336 * 4096)


def test_narrow_experts_are_quantised_in_the_expand_kernel_and_read_narrow_weights() -> None:
    """NVFP4: the expand kernel writes 0.5 B + a 1-byte scale per 16 elements; no quantise kernel of its own; the
    products read 0.5 + 1/16 B per weight at the fp4 rate. Weight-only int4 keeps bf16 products, weights at 0.5 B."""
    t, h, i, k, e = 256.0, 4096.0, 1024.0, 4.0, 16.0
    kernels = roofline.moe(FP4, t, h, i, k, e, quantization_scheme="nvfp4", routing="balanced")
    assert len(kernels) == 7
    _, expand, _, up, _, _, _ = kernels
    pairs = t * k
    assert float(expand.out_bytes) == pytest.approx(pairs * h * (0.5 + 1 / 16))
    assert up.peak == 4 * 989e12
    assert float(up.extra["b_bytes"]) == pytest.approx((0.5 + 1 / 16) * e * h * 2 * i)
    bf16 = roofline.moe(H100, t, h, i, k, e, routing="balanced")[3]
    int4 = roofline.moe(H100, t, h, i, k, e, routing="balanced", weight_dtype="int4")[3]
    assert float(bf16.external_in_bytes) - float(int4.external_in_bytes) == pytest.approx(1.5 * e * h * 2 * i)
    assert int4.peak == bf16.peak == 989e12


def test_power_law_routing_loads_the_timed_rank_more_than_a_balanced_one() -> None:
    """The most-loaded of 8 ranks under a power law computes more pairs than tokens · k / 8; one rank holds all;
    an expert sees a token at most once: top-8 of 8 experts gives each expert every token (balanced), and top-2 of 8
    over 8 ranks gives the hottest expert's rank all 4 096 tokens, 4× its balanced 1 024 pairs."""
    heavy, _ = rank_load(256, 8, 8, 8192, 1.2)
    assert heavy > 1.05
    assert rank_load(256, 1, 8, 8192, 1.2)[0] == pytest.approx(1.0)
    assert rank_load(8, 8, 8, 100, 1.2)[0] == pytest.approx(1.0)
    assert rank_load(8, 8, 2, 4096, 1.2)[0] == pytest.approx(4.0)
    # the load grows smoothly with the batch (no step where tokens · k passes the expert count)
    steps = [rank_load(256, 8, 8, t, 1.2) for t in (31, 32, 33)]
    assert all(abs(b[1] - a[1]) < 1.0 for a, b in itertools.pairwise(steps))
    skewed = roofline.moe(H100, 8192.0, 4096.0, 1536.0, 8.0, 256.0, 1.0, 8.0, routing="power_law", alpha=1.2)
    balanced = roofline.moe(H100, 8192.0, 4096.0, 1536.0, 8.0, 256.0, 1.0, 8.0, routing="balanced")
    assert float(skewed[2].flops) == pytest.approx(heavy * float(balanced[2].flops))
    with pytest.raises(ValueError, match="unknown routing"):
        roofline.moe(H100, 8.0, 64.0, 64.0, 2.0, 8.0, routing="zipf")


def test_an_all_to_all_moe_routes_and_finalizes_only_the_devices_own_tokens() -> None:
    """32 devices exchange tokens all to all: a device holding 256 of the group's 8 192 tokens routes its 256 (256 ·
    256 fp32 logits) and sums the k = 8 outputs the combine returns for each of them (256 · 8 rows in, 256 out); the
    experts still compute the 8 192 · 8 / 32 = 2 048 pairs routed to the device. Without `own_tokens` every device
    routes all 8 192 and writes partial sums for all of them (allgather / reduce-scatter)."""
    t, own, h, i, k, e, ep = 8192.0, 256.0, 7168.0, 2048.0, 8.0, 256.0, 32.0
    routing, expand, *_, finalize = roofline.moe(H100, t, h, i, k, e, 1.0, ep, routing="balanced", own_tokens=own)
    assert float(routing.chained_in_bytes) == 4 * own * e
    assert float(expand.chained_in_bytes) == 2 * (t * k / ep) * h
    assert float(finalize.chained_in_bytes) == 2 * own * k * h and float(finalize.out_bytes) == 2 * own * h
    allgather = roofline.moe(H100, t, h, i, k, e, 1.0, ep, routing="balanced")
    assert float(allgather[0].chained_in_bytes) == 4 * t * e and float(allgather[-1].out_bytes) == 2 * t * h


def test_sm120_runs_the_tma_grouped_gemms_for_fp4_products_only() -> None:
    """TensorRT-LLM's sm_120 MoE specialisations (RTX Pro 6000) are NVFP4 and fp8 activations on fp4 weights; bf16 and
    fp8 experts there run the Ampere grouped GEMM, without the set-up kernel."""
    sm120 = replace(FP4, architecture="sm_120", matrix_flops_per_s={**FP4.matrix_flops_per_s, "fp8": 2 * 989e12})
    args = (256.0, 4096.0, 1024.0, 4.0, 16.0)
    assert len(roofline.moe(sm120, *args, routing="balanced")) == 6
    assert len(roofline.moe(sm120, *args, quantization_scheme="fp8_tensor", routing="balanced")) == 6
    assert len(roofline.moe(sm120, *args, quantization_scheme="nvfp4", routing="balanced")) == 7


def test_the_grouped_gemms_never_split_k() -> None:
    """TensorRT-LLM's MoE GEMM configurations allow no split-K (`max_split_k = 1` in `getTmaWarpSpecializedConfigs`
    and `getAmpereConfigs`, moe_gemm_template_dispatch.h): 16 tokens to one expert of width 256 over hidden 8 192 on
    an A100 is 16 × 512 × 8 192 and 16 × 8 192 × 256, a few tiles for 108 SMs, which a plain product of the same
    shape splits over k; the layer's products walk the whole k loop."""
    plain = roofline.matmul(A100, 16, 512, 8192)[-1]
    assert float(plain.extra["split_k"]) > 1
    _, _, up, _, down, _ = roofline.moe(A100, 16.0, 8192.0, 256.0, 1.0, 1.0, routing="balanced")
    assert float(up.extra["split_k"]) == float(down.extra["split_k"]) == 1.0
    assert float(up.launches) == float(down.launches) == 1.0
