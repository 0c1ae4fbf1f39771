from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]

# Bytes per element of each storage type. tf32 is stored as fp32; fp6 packs four to three bytes (MXFP6's block
# scales not counted); int4 packs two to a byte. fp4 is NVFP4 as NVIDIA's devices run it: two values a byte and one
# e4m3 scale per 16-value block, 0.5 + 1/16 byte an element (NVIDIA Technical Blog, "Introducing NVFP4 for Efficient
# and Accurate Low-Precision Inference", 2025; OCP MXFP4's one e8m0 scale per 32 would be 0.53125).
DTYPE_BYTES: Mapping[str, float] = {
    "fp64": 8.0, "fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp6": 0.75, "int8": 1.0,
    "int4": 0.5, "fp4": 0.5625,
}  # fmt: skip


# Of those bytes, the block scales a narrow type stores beside its values (NVFP4: one byte per 16): a row's alignment
# is a matter of its packed values alone.
BLOCK_SCALE_BYTES: Mapping[str, float] = {"fp4": 1.0 / 16.0}


def value_bytes(dtype: str) -> float:
    """Bytes of one element's packed value, without its share of block scales (`BLOCK_SCALE_BYTES`)."""
    return dtype_bytes(dtype) - BLOCK_SCALE_BYTES.get(dtype, 0.0)


def dtype_bytes(dtype: str) -> float:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}") from None


# Bytes per clock per SM at which the thread blocks of a group read lines another block of the group has just brought
# into L2 (masked-MHA decode's shared K/V), for an NVIDIA GPU whose profile gives no L2 bandwidth (none of B200's,
# L40S's, RTX Pro 6000's or H200's datasheets does). Chosen across devices from aiconfigurator's decode tables, the
# masked-MHA rows of caches over 1 000 keys: A100 22.9, B200 22.1, L40S 15.9, RTX Pro 6000 13.1 B/clock/SM (their
# medians); 19.0 is the median of the four, and each device's figure with its own data left out is 15.9-22.1
# (decision 0026). For scale: the H100 profile's measured L2 (5.5 TB/s) is 22.8 B/clock/SM at its 132 SMs × 1.83 GHz.
L2_SHARED_READ_BYTES_PER_CLOCK_PER_UNIT = 19.0

# Achieved efficiency of a narrow product relative to the bf16 product on the same device (`eff_matmul` is bf16's):
# the datasheets' fp8 and fp4 rates are 2× and 4× bf16's, but a library's fp8/fp4 kernels reach a smaller share of
# them (the operands' staging, the scale handling in the main loop and epilogue, the power limit at a higher math
# rate: none of which a datasheet gives). Keys: "fp8" (per-tensor scales; int8 and fp6 run on the same path),
# "fp8_block" (DeepSeek-V3's 1×128 activation and 128×128 weight scales, applied in the main loop). Chosen from
# measured data by `bench.loo`'s rule (the median over devices of each device's median ratio of achieved fractions
# of peak, the product X (the call less its modelled quantise kernels) against bf16, over the GEMMs of at least 2e11
# FLOPs that both tables hold) on aiconfigurator's TensorRT-LLM 1.3.0rc20 tables of B200, L40S and RTX Pro 6000
# (decision 0028); the leave-one-device-out report re-derives it without each device. fp4 has none: a 4-bit
# product runs at bf16's efficiency of its own peak, bounded by its k-tiles' wait (`BLOCK_SCALED_STEP_LATENCY`).
NARROW_MATMUL_EFFICIENCY: Mapping[str, float] = {"fp8": 0.91, "fp8_block": 0.71}
# The fraction of the device memory's achievable bandwidth (`eff_memory`, what copies reach) that a matrix product's
# operand stream reaches on a GPU: a tiled product fetches its operands tile by tile through a software pipeline of a
# few stages (cp.async / TMA), not as a copy's many independent loads. Chosen from measured data by `bench.loo`'s
# rule (`stream_fractions`: per device, the median over aiconfigurator's decode-shaped bf16 GEMMs, m ≤ 16, whose
# weights are at least twice the L2 — cold whatever the harness does — of the bytes over (measured − the device's
# shortest GEMM) over the profile's achievable bandwidth; then the median over devices): A100 0.862, B200 0.876,
# L40S 0.926, RTX Pro 6000 1.035 (over its datasheet's 1.6 TB/s: decision 0041), median 0.90; the leave-one-device-out
# report re-derives it without each device.
MATMUL_STREAM_EFFICIENCY = 0.90
# A block-scaled fp4 product (NVFP4: e2m1 values, an e4m3 scale per 16) waits this fraction of a device-memory round
# trip (`memory_latency_s`) for every k-tile of its main loop (`roofline.ops.BLOCK_SCALED_FP4_K_TILE`), however little
# math the tile holds: aiconfigurator's NVFP4 GEMMs of one wave (m ≤ 16, n ≤ 4096, k ≥ 8192) grow by 0.485 µs per
# 256-deep k-tile on B200 (sm_100) and 0.487 µs per 128-deep k-tile on RTX Pro 6000 (sm_120), whatever n and m up to
# a few hundred rows: 0.746 and 0.749 of the profiles' 650 ns. Chosen from those rows by `bench.loo`'s rule
# (`fp4_step_fractions`: per device, the least-squares slope over the k-tiles, over the latency; the median over
# devices), re-derived leave one device out (each device from the other's); decision 0042.
BLOCK_SCALED_STEP_LATENCY = 0.75
NARROW_MATMUL_KEYS: Mapping[str, str] = {
    "fp8": "fp8", "int8": "fp8", "fp6": "fp8", "fp4": "fp4", "fp8_block": "fp8_block",
}  # fmt: skip


@dataclass(frozen=True)
class Hardware:
    """What the roofline needs of a device, in SI units. Built from a catalogue profile by the service.

    Peaks are dense FLOP/s; efficiencies are the fractions of peak that well-tuned kernels reach on large shapes.
    """

    name: str
    units: int  # SMs / CUs / TensorCores / cores
    matrix_flops_per_s: Mapping[str, float]
    vector_flops_per_s: Mapping[str, float]
    memory_bytes_per_s: float
    memory_capacity_bytes: float
    launch_s: float
    eff_matmul: float
    eff_vector: float
    eff_memory: float
    special_function_ops_per_s: float | None = None
    cache_bytes: float = 0.0
    # Last-level cache (L2) bandwidth to the compute units, peak; None: unknown, so data re-read from the cache is
    # charged to device memory (no cache level is modelled). Its achievable fraction is taken as `eff_memory`'s.
    cache_bandwidth_bytes_per_s: float | None = None
    local_bytes_per_unit: float = 0.0
    tiles: tuple[tuple[int, int], ...] = ((128, 128),)
    concurrent_tiles_per_unit: int = 1
    alignment_bytes: int = 16
    memory_latency_s: float | None = None  # loaded device-memory latency; None: no memory-parallelism limit
    threads_per_unit: int | None = None  # resident threads per compute unit (CUDA: max threads per SM)
    architecture: str | None = None  # instruction-set generation, e.g. "sm_80", for per-architecture costs
    kind: str = "gpu"  # "gpu", "tpu" or "cpu": what a framework's default precision runs fp32 matmuls as
    clock_hz: float | None = None  # compute-unit clock (boost), for rates given per clock
    # The timing scope's cache state. False (cold): a kernel's reads and writes go to device memory unless the op
    # itself re-reads data (`Kernel.cache_in_bytes`), as in serving, where each layer's weights and activations differ.
    # True (warm): a benchmark's steady state, the same call replayed (a CUDA-graph loop over one op), so a kernel
    # whose bytes fit in the last-level cache finds them there (`roofline._kernels.single`).
    warm_cache: bool = False
    # The model's two combination norms, chosen on measured data (`roofline.kernel_time`'s overlap of math and memory,
    # `roofline._kernels.MEMORY_QUEUEING_NORM`'s two memory limits); None: the shipped value. Set only to re-derive
    # them without a device (`python -m bench.validate --leave-one-device-out`, docs/decisions/0027).
    overlap_norm: float | None = None
    memory_queueing_norm: float | None = None
    # Narrow products' efficiency relative to bf16's (`NARROW_MATMUL_EFFICIENCY`); None: the shipped table. Set only to
    # re-derive it without a device (`bench.loo`).
    narrow_matmul_efficiency: Mapping[str, float] | None = None
    # A matrix product's operand stream against a copy's (`MATMUL_STREAM_EFFICIENCY`); None: the shipped value. Set only
    # to re-derive it without a device (`bench.loo`).
    matmul_stream_efficiency: float | None = None
    # A block-scaled fp4 product's wait per k-tile, as a fraction of `memory_latency_s` (`BLOCK_SCALED_STEP_LATENCY`);
    # None: the shipped value. Set only to re-derive it without a device (`bench.loo`).
    block_scaled_step_latency: float | None = None
    # A benchmark that replays one product over a few copies of its weights (`bench.validate`'s `weight_copies`):
    # True, the products' operands are read from the last-level cache where they fit (`warm_cache` for products
    # alone; the other kernels stay as `warm_cache` says).
    warm_operands: bool = False
    extra: Mapping[str, float] = field(default_factory=dict)

    def matmul_efficiency(self, algorithm: str) -> float:
        """Matrix efficiency of a product run as `algorithm` (a dtype, or "fp8_block"): `eff_matmul` (bf16's), times
        the narrow types' own factor (`NARROW_MATMUL_EFFICIENCY`)."""
        key = NARROW_MATMUL_KEYS.get(algorithm)
        if key is None:
            return self.eff_matmul
        table = NARROW_MATMUL_EFFICIENCY if self.narrow_matmul_efficiency is None else self.narrow_matmul_efficiency
        return self.eff_matmul * table.get(key, 1.0)

    @property
    def block_scaled_step_s(self) -> float:
        """Seconds a block-scaled fp4 product waits per k-tile (`BLOCK_SCALED_STEP_LATENCY` × the memory latency); 0
        on a profile with no memory latency."""
        if self.memory_latency_s is None:
            return 0.0
        fraction = (
            BLOCK_SCALED_STEP_LATENCY if self.block_scaled_step_latency is None else self.block_scaled_step_latency
        )
        return fraction * self.memory_latency_s

    @property
    def stream_efficiency(self) -> float:
        """`MATMUL_STREAM_EFFICIENCY` (or its re-derived value) on a GPU; 1.0 elsewhere (no GPU pipeline to stage)."""
        if self.kind != "gpu":
            return 1.0
        return MATMUL_STREAM_EFFICIENCY if self.matmul_stream_efficiency is None else self.matmul_stream_efficiency

    def matrix_peak(self, dtype: str) -> tuple[float, str]:
        """Peak FLOP/s of a matrix product with inputs in `dtype` (fp32 accumulate) and the unit that runs it."""
        if dtype in self.matrix_flops_per_s:
            return self.matrix_flops_per_s[dtype], "matrix"
        if dtype in self.vector_flops_per_s:
            return self.vector_flops_per_s[dtype], "vector"
        have = sorted(set(self.matrix_flops_per_s) | set(self.vector_flops_per_s))
        raise ValueError(f"{self.name} has no {dtype} peak; it has {', '.join(have)}")

    def vector_peak(self, dtype: str) -> float:
        """Vector-unit FLOP/s for elementwise math on `dtype`; narrow types compute in fp32 where no rate is given."""
        if dtype in self.vector_flops_per_s:
            return self.vector_flops_per_s[dtype]
        if "fp32" in self.vector_flops_per_s:
            return self.vector_flops_per_s["fp32"]
        return max(self.vector_flops_per_s.values())

    @property
    def shared_l2_read_bytes_per_s(self) -> float | None:
        """Rate at which compute units read lines other units have just brought into L2: the profile's L2
        bandwidth, else, for an NVIDIA GPU (an `sm_` architecture) with a known clock, units × clock ×
        `L2_SHARED_READ_BYTES_PER_CLOCK_PER_UNIT`; None when neither is known."""
        if self.cache_bandwidth_bytes_per_s is not None:
            return self.cache_bandwidth_bytes_per_s
        if self.clock_hz and self.architecture and self.architecture.startswith("sm_"):
            return self.units * self.clock_hz * L2_SHARED_READ_BYTES_PER_CLOCK_PER_UNIT
        return None

    @property
    def on_chip_bytes(self) -> float:
        """Everything that can hold an intermediate without a round trip to device memory: cache + local memories."""
        return self.cache_bytes + self.units * self.local_bytes_per_unit

    def parallel_bandwidth(self, threads: Array, access_bytes: float, dependent_loads: float = 1.0) -> Array:
        """Device-memory bandwidth that `threads` threads can sustain when each keeps one `access_bytes` load in
        flight (Little's law: bytes in flight = bandwidth × latency; Volkov, "Understanding Latency Hiding on GPUs",
        PhD thesis, UC Berkeley 2016). `dependent_loads` loads in series (an index, then the row it points to)
        divide it. Infinite when the profile gives no latency or thread count (TPUs, CPUs): no limit is modelled.
        """
        if self.memory_latency_s is None or self.threads_per_unit is None:
            return np.full(np.shape(threads), np.inf)
        resident = np.minimum(np.asarray(threads, dtype=np.float64), self.units * self.threads_per_unit)
        out: Array = resident * access_bytes / (self.memory_latency_s * dependent_loads)
        return out
