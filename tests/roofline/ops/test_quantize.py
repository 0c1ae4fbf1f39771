"""Quantised products (`roofline.matmul(..., quantization=...)`) and the narrow types' matrix efficiency, worked by hand
on the H100 profile (tests/roofline/profiles.py: 132 SMs, bf16 989 and fp8 1979 TFLOP/s, eff_matmul 0.81, 3.35 TB/s
at 0.90, 50 MB of L2)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import roofline
from tests.roofline.profiles import H100

FP8 = roofline.NARROW_MATMUL_EFFICIENCY["fp8"]
B200_LIKE = replace(
    H100, name="fp4 device", units=148, matrix_flops_per_s={**H100.matrix_flops_per_s, "fp4": 9000e12}
)  # H100's figures with an fp4 rate and 148 SMs: enough for the tile rules below


def main_kernel(kernels: list[roofline.Kernel]) -> roofline.Kernel:
    return max(kernels, key=lambda k: float(k.flops))


def test_an_fp8_product_runs_at_its_own_share_of_the_fp8_peak() -> None:
    """8192³ in 128 × 128 tiles: 64 · 64 = 4 096 tiles over 132 SMs, ⌈4096 / 132⌉ = 32 waves, each 2·128·128·8192
    FLOPs per SM at the fp8 peak × eff_matmul × the fp8 factor; bf16 keeps eff_matmul alone."""
    per_wave_flops = 132 * 2.0 * 128 * 128 * 8192
    fp8 = main_kernel(roofline.matmul(H100, 8192, 8192, 8192, dtype="fp8", tile=(128, 128)))
    assert float(fp8.matrix_s) == pytest.approx(32 * per_wave_flops / (1979e12 * 0.81 * FP8), rel=1e-12)
    bf16 = main_kernel(roofline.matmul(H100, 8192, 8192, 8192, dtype="bf16", tile=(128, 128)))
    assert float(bf16.matrix_s) == pytest.approx(32 * per_wave_flops / (989e12 * 0.81), rel=1e-12)
    assert H100.matmul_efficiency("int8") == H100.matmul_efficiency("fp8") == pytest.approx(0.81 * FP8)
    assert H100.matmul_efficiency("tf32") == H100.eff_matmul


def test_a_profile_can_carry_its_own_narrow_efficiencies() -> None:
    """`narrow_matmul_efficiency` replaces the shipped table (the leave-one-device-out folds set it)."""
    hw = replace(H100, narrow_matmul_efficiency={"fp8": 0.5})
    assert hw.matmul_efficiency("fp8") == pytest.approx(0.405)
    assert hw.matmul_efficiency("fp8_block") == hw.eff_matmul  # a key the table lacks: no factor


def test_dynamic_per_tensor_fp8_reads_its_input_twice_and_runs_four_kernels_first() -> None:
    """4096 × 8192 bf16 input (64 MiB, more than the 50 MB L2): the amax reduction reads 2 B per element and writes one
    fp32 value; the quantise kernel reads 2 B and writes 1 B per element plus the 4-byte scale; the memset and the
    scale's cast move 4 bytes each. The product then reads A at 1 B and the weights at 1 B per element."""
    m, n, k = 4096.0, 1024.0, 8192.0
    kernels = roofline.matmul(H100, m, n, k, dtype="bf16", quantization="fp8_tensor")
    assert len(kernels) == 5
    amax, quantise, memset, cast, product = kernels
    assert float(amax.chained_in_bytes) == 2.0 * m * k and float(amax.out_bytes) == 4.0
    assert float(quantise.chained_in_bytes) == 2.0 * m * k and float(quantise.out_bytes) == m * k + 4.0
    assert float(amax.cache_in_bytes) == float(quantise.cache_in_bytes) == 0.0
    assert float(memset.out_bytes) == float(cast.out_bytes) == 4.0
    assert float(product.external_in_bytes) == m * k + k * n
    assert float(product.out_bytes) == 2.0 * m * n  # bf16 out
    assert product.peak == 1979e12


def test_an_input_that_fits_in_l2_is_read_from_there() -> None:
    """128 × 4096 bf16 (1 MiB) fits in the 50 MB L2: the quantise pass reads it from L2, not device memory; block
    scales: one 4-byte scale per 128 elements."""
    m, k = 128.0, 4096.0
    quantise, _ = roofline.matmul(H100, m, 4096.0, k, dtype="bf16", quantization="fp8_block")
    assert float(quantise.chained_in_bytes) == 0.0
    assert float(quantise.cache_in_bytes) == 2.0 * m * k
    assert float(quantise.out_bytes) == m * k + 4.0 * m * k / 128.0


def test_nvfp4_packs_two_values_a_byte_with_a_scale_per_16_and_needs_an_fp4_rate() -> None:
    m, n, k = 256.0, 4096.0, 4096.0
    quantise, product = roofline.matmul(B200_LIKE, m, n, k, dtype="bf16", quantization="nvfp4")
    assert float(quantise.out_bytes) == 0.5 * m * k + m * k / 16.0
    # A and the weights both as NVFP4 stores them: 0.5 B a value and a 1-byte scale per 16 (roofline.DTYPE_BYTES)
    assert float(product.external_in_bytes) == (0.5 + 1.0 / 16.0) * (m * k + k * n)
    assert product.peak == 9000e12
    with pytest.raises(ValueError, match="no fp4 peak"):
        roofline.matmul(H100, m, n, k, dtype="bf16", quantization="nvfp4")
    with pytest.raises(ValueError, match="unknown quantization"):
        roofline.matmul(H100, m, n, k, dtype="bf16", quantization="int3")


def test_block_scaled_products_never_split_k_and_nvfp4_tiles_are_128_rows_high() -> None:
    """16 × 512 × 65 536: few output tiles. cuBLASLt's per-tensor fp8 GEMM splits k over the idle SMs; the block-scaled
    kernels walk the whole k loop per tile; NVFP4's tiles are at least 128 rows high."""
    per_tensor = main_kernel(roofline.matmul(B200_LIKE, 16, 512, 65536, dtype="bf16", quantization="fp8_tensor"))
    assert float(per_tensor.extra["split_k"]) > 1
    for scheme in ("fp8_block", "nvfp4"):
        product = main_kernel(roofline.matmul(B200_LIKE, 16, 512, 65536, dtype="bf16", quantization=scheme))
        assert float(product.extra["split_k"]) == 1
    fp4 = main_kernel(roofline.matmul(B200_LIKE, 16, 512, 65536, dtype="bf16", quantization="nvfp4"))
    assert float(fp4.extra["tile_m"]) >= 128
    assert math.isclose(float(fp4.extra["tiles"]), math.ceil(512 / float(fp4.extra["tile_n"])))


def test_a_block_scaled_fp4_product_waits_for_every_k_tile() -> None:
    """NVFP4 on sm_100 (k-tiles 256 deep, CUTLASS's generator) and sm_120 (128 deep), each k-tile waiting 0.75 of the
    650 ns memory latency (`BLOCK_SCALED_STEP_LATENCY`, decision 0042). m = 1, n = 512, k = 65 536: one wave of
    128-row tiles whose math is nothing, so the product takes 65 536 / 256 · 0.75 · 650 ns = 124.8 µs on sm_100 and
    twice that, 249.6 µs, on sm_120 (aiconfigurator measured 127.4 µs on B200, 244.4 µs on RTX Pro 6000, the
    call's quantise kernel and fixed costs included). A plain fp4 product runs as NVFP4 (no split-K) and waits the
    same; on an architecture without block-scaled fp4 tiles it splits k 64 ways and has no wait: a few µs."""
    assert roofline.BLOCK_SCALED_STEP_LATENCY == 0.75
    for arch, seconds in (("sm_100", 124.8e-6), ("sm_120", 249.6e-6)):
        hw = replace(B200_LIKE, architecture=arch, memory_latency_s=650e-9)
        product = main_kernel(roofline.matmul(hw, 1, 512, 65536, dtype="bf16", quantization="nvfp4"))
        assert float(product.matrix_s) == pytest.approx(seconds, rel=1e-12)
        plain = main_kernel(roofline.matmul(hw, 1, 512, 65536, dtype="fp4"))
        assert float(plain.matrix_s) == pytest.approx(seconds, rel=1e-12)
    other = replace(B200_LIKE, architecture="sm_90", memory_latency_s=650e-9)
    assert float(main_kernel(roofline.matmul(other, 1, 512, 65536, dtype="fp4")).matrix_s) < 10e-6


def test_block_scaled_fp8_on_ada_is_one_kernel_of_32_by_128_tiles() -> None:
    """TensorRT-LLM's block-scaled fp8 GEMM on sm_89 is a single kernel, `GemmShape<32, 128, 128>`
    (`gemm_dispatch_sm89`): 4096 × 4096 × 4096 runs ⌈4096/32⌉ · ⌈4096/128⌉ = 4 096 tiles of 32 × 128, in
    ⌈4096 / 132⌉ = 32 waves over the H100-sized grid. The same product on sm_90 keeps its tile search, and a tile given
    by the caller wins over the fixed one."""
    ada = replace(H100, architecture="sm_89")
    fixed = main_kernel(roofline.matmul(ada, 4096, 4096, 4096, quantization="fp8_block"))
    assert (float(fixed.extra["tile_m"]), float(fixed.extra["tile_n"])) == (32.0, 128.0)
    assert float(fixed.extra["tiles"]) == 128 * 32 and float(fixed.extra["waves"]) == 32
    searched = main_kernel(roofline.matmul(H100, 4096, 4096, 4096, quantization="fp8_block"))
    assert (float(searched.extra["tile_m"]), float(searched.extra["tile_n"])) != (32.0, 128.0)
    given = main_kernel(roofline.matmul(ada, 4096, 4096, 4096, quantization="fp8_block", tile=(128, 128)))
    assert float(given.extra["tile_m"]) == 128.0
