"""The kernels that quantise a 16-bit activation before a narrow product, as TensorRT-LLM's quantised linear layers
run them (its PyTorch flow, `_torch/modules/linear.py`, with the kernels of `cpp/tensorrt_llm/kernels/quantization*`
and `cudaFp8Utils.h`; the copies vendored in FlashInfer 0.7.2's wheel were read, decision 0028):

- `fp8_tensor`: dynamic per-tensor fp8 (no calibrated input scale): the amax buffer is cleared (a memset), a grid-wide
  amax reduction reads the input, a quantise kernel reads it again and writes fp8, and the scale is cast to fp32 for
  cuBLASLt's scaled GEMM (`invokeComputeFP8QuantizeScale`, `invokeQuantizeMatrix`: four kernels before the product).
- `fp8_block`: DeepSeek-V3's 1×128 activation groups: one per-token-group kernel reads the input and writes fp8 with
  one 4-byte scale per 128 elements (`scale_1x128_kernel`; DeepGEMM's per-token-group quantisation on sm100).
- `nvfp4`: one `fp4_quantize` kernel reads the input and writes 4-bit values with one e4m3 scale per 16, in the
  swizzled layout the GEMM reads (no separate swizzle kernel), from the checkpoint's static global scale.

Weight scales are prepared once at load: they cost nothing per call. The products: cuBLASLt's fp8 scaled GEMM for
per-tensor scales, which splits k over an under-filled grid as cuBLAS does; the block-scaled kernels (DeepGEMM, the
sm89 `fp8_blockscale_gemm`) and the CUTLASS NVFP4 GEMM run one thread block per output tile over the whole k loop
(no split-K among their configurations), so a narrow, deep product leaves most units idle.
"""

from __future__ import annotations

from dataclasses import dataclass

from roofline import _num
from roofline._estimate import Num
from roofline._hardware import Hardware
from roofline._kernels import Kernel
from roofline.ops._memory_bound import elementwise_kernel


@dataclass(frozen=True)
class Quantization:
    """How a 16-bit input is quantised before a product of `dtype` (the narrow type the product runs at)."""

    dtype: str
    efficiency: str  # the `Hardware.matmul_efficiency` key of the product
    reads: float  # passes over the 16-bit input (an amax reduction, then the quantise kernel)
    out_bytes: float  # bytes written per element (the narrow value)
    group: float | None  # elements per scale; None: one scale for the tensor
    scale_bytes: float  # bytes of one scale
    small_kernels: int  # kernels of no measurable work (memset, the scale's cast)
    weight_bytes: float  # bytes per weight element the product reads, scales included
    split_k: bool  # whether the product's library splits k over an under-filled grid (`roofline.ops.SPLIT_K`)
    min_tile_m: int = 0  # the product's smallest output-tile height (rows of A per thread block)
    quantizes_input: bool = True  # False: weight-only (the input stays 16-bit, dequantised weights in the kernel)


# A 4-bit product on a GPU with fp4 matrix units is block-scaled (NVFP4 or MXFP4: the tensor cores take e2m1 values
# only with their scales); its main loop waits `Hardware.block_scaled_step_s` for every k-tile. The k depth of a
# block-scaled fp4 product's k-tile per architecture, from CUTLASS's kernel generator (nvidia-cutlass
# 4.2.0, `cutlass_library/generator.py`): sm_100's `GenerateSM100_TensorOp_fp4_UMMA_gemm_with_block_scaled` builds
# every tile 4 instructions deep, `assert math_inst.instruction_shape[2] * 4 == 256`; sm_120's
# `GenerateSM120_TensorOp_fp4_UMMA_gemm_with_block_scaled` lists tiles [128, 128, 128] (both schedules) and
# [128, 128, 256]: the first, 128.
BLOCK_SCALED_FP4_K_TILE: dict[str, int] = {"sm_100": 256, "sm_103": 256, "sm_120": 128, "sm_121": 128}


# A scheme whose product is one fixed kernel on an architecture: its output tile (rows of A, columns of B). On Ada,
# TensorRT-LLM's block-scaled fp8 GEMM is a single CUTLASS kernel, `GemmShape<32, 128, 128>`, 3 stages
# (`gemm_dispatch_sm89`, fp8_blockscale_gemm_kernel.cuh in FlashInfer 0.7.4's copy of cutlass_kernels/
# fp8_blockscale_gemm): no tile choice.
FIXED_TILES: dict[tuple[str, str], tuple[int, int]] = {("fp8_block", "sm_89"): (32, 128)}


QUANTIZATIONS: dict[str, Quantization] = {
    "fp8_tensor": Quantization("fp8", "fp8", 2.0, 1.0, None, 4.0, 2, 1.0, True),
    "fp8_block": Quantization("fp8", "fp8_block", 1.0, 1.0, 128.0, 4.0, 0, 1.0 + 4.0 / (128.0 * 128.0), False),
    "nvfp4": Quantization("fp4", "fp4", 1.0, 0.5, 16.0, 1.0, 0, 0.5 + 1.0 / 16.0, False, 128),
    # gpt-oss's MXFP4 experts (OCP MX: 4-bit values, one e8m0 scale per 32): with MXFP8 activations (one quantise
    # kernel, a scale per 32) on the fp8 path, or weight-only with bf16 activations on the bf16 path.
    "w4a8_mxfp4_mxfp8": Quantization("fp8", "fp8", 1.0, 1.0, 32.0, 1.0, 0, 0.5 + 1.0 / 32.0, False, 128),
    "w4a16_mxfp4": Quantization("bf16", "bf16", 0.0, 2.0, None, 0.0, 0, 0.5 + 1.0 / 32.0, False, 0, False),
}


def quantization(name: str) -> Quantization:
    try:
        return QUANTIZATIONS[name]
    except KeyError:
        raise ValueError(f"unknown quantization {name!r}; known: none, {', '.join(QUANTIZATIONS)}") from None


def quantize_input(hw: Hardware, elements: Num, q: Quantization, in_bytes: float) -> list[Kernel]:
    """The kernels that quantise `elements` of `in_bytes` each before the product: for per-tensor scales an amax
    reduction (it reads the input, writes one value) then the quantise pass; for block scales the one pass that
    writes values and scales; plus the scheme's kernels of no measurable work.

    The input is the output of the op before (or, in a benchmark loop, the same tensor as the call before): where it
    fits in the last-level cache, the passes read it from there (`Kernel.cache_in_bytes`, at the device's L2 rate:
    `Hardware.shared_l2_read_bytes_per_s` where no L2 bandwidth is published), not from device memory. On a GDDR
    device the L2 serves it several times faster than memory; on B200 its per-SM L2 rate is below the HBM3e rate."""
    zero = _num.zeros_like(elements)
    if not q.quantizes_input:
        return []
    size = in_bytes * elements
    cached = _num.where(size <= hw.cache_bytes, 1.0, 0.0) if hw.shared_l2_read_bytes_per_s is not None else zero

    def reading(kernel: Kernel, read: Num) -> Kernel:
        kernel.chained_in_bytes = read * (1.0 - cached)
        kernel.cache_in_bytes = read * cached
        return kernel

    kernels: list[Kernel] = []
    if q.reads > 1.0:  # the amax reduction: max(|x|) into one fp32 value
        reads = (q.reads - 1.0) * size
        kernels.append(reading(elementwise_kernel(hw, elements, 1.0, 0.0, zero, reads, zero + 4.0, in_bytes), reads))
    scales = zero + 1.0 if q.group is None else elements / q.group
    out = q.out_bytes * elements + q.scale_bytes * scales
    kernels.append(reading(elementwise_kernel(hw, elements, 2.0, 0.0, zero, size, out, in_bytes), size))
    for _ in range(q.small_kernels):  # a memset of the amax, the scale's cast: one 4-byte value each
        kernels.append(elementwise_kernel(hw, zero + 1.0, 0.0, 0.0, zero, zero + 4.0, zero + 4.0, 4.0))
    return kernels
