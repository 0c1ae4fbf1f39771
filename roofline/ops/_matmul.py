"""Matrix products and the tile search a library runs to pick their tiles (and split k), vectorised over shapes."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from roofline import _num
from roofline._estimate import Num
from roofline._hardware import Hardware, dtype_bytes, value_bytes
from roofline._kernels import Kernel, arr
from roofline._num import Bool
from roofline.ops._memory_bound import elementwise_kernel
from roofline.ops._precision import matmul_rate
from roofline.ops._quantize import BLOCK_SCALED_FP4_K_TILE, FIXED_TILES, quantize_input
from roofline.ops._quantize import quantization as _quantization

# Matmul tiles are the output tiles a library picks among; waves are rounds of tiles over the compute units
# (NVIDIA, "Matrix Multiplication Background", dimension quantization; seed 002's 1792 → 1793 example).

# Split-K: when an m × n output has fewer tiles than the device has slots, one wave leaves units idle and each
# busy unit walks the whole k loop. Libraries then split k into s slices computed by separate thread blocks and sum
# the fp32 partial tiles in a second kernel (CUTLASS "split-K" / "stream-K"; cuBLAS picks split-K for small m·n
# with large k). Only under-filled grids are split (a full wave gains nothing and pays the reduction); among the
# splits the cheapest wins, each slice paying its own pipeline fill (`K_STEP`), so shallow slices lose by cost
# rather than by a cut-off, and the time never falls as k grows.
SPLIT_K = (1, 2, 4, 8, 16, 32, 64)
_SPLITS = np.asarray(SPLIT_K, dtype=np.float64)
_SEARCH_CHUNK = 512  # points per step of the tile search: its (candidate, split, point) grid stays in a 2 MiB L2
PARTIAL_BYTES = 4.0  # fp32 partial sums
_BOUND_MARGIN = 1.0 - 1e-12  # a lower bound's rounding (a few ulps, ~1e-15 relative) stays below this

# What a tile cannot overlap with its math: a thread block first waits for its first k-step of A and B to arrive
# (its software pipeline starts empty) and stores its output tile only after its last k-step (Ampere GEMM kernels
# are not persistent: the next tile on that unit starts after the store). Both transfers share device bandwidth
# with the other active tiles, so each wave keeps the compute units waiting for
# ((tm + tn)·K_STEP·size(in) + tm·tn·size(out)) · active tiles / bandwidth. K_STEP is the k depth of one pipeline
# stage (32 or 64 in cuBLAS's and CUTLASS's sm80 16-bit kernels: "…_stages_32x5…", "…_stages_64x3…"; CUTLASS,
# "Efficient GEMM in CUDA": threadblock tile, software pipelining). This is what makes a k = 128 GEMM twice as slow
# as its FLOPs and bytes say, and why the last wave of a large GEMM costs more than its share of the math.
K_STEP = 32

# A dimension whose row is not a multiple of the device's vector width (16 bytes on NVIDIA: 8 bf16 elements) loses
# full-width, coalesced loads and falls back to slower kernels. Karpathy measured ~25 % on nanoGPT's whole training
# step from padding the vocabulary 50257 → 50304; the LM head is under half of that step, so the head itself runs
# near half speed. Modelled as this factor on matrix efficiency (an assumption, replaced by calibration).
MISALIGNED_EFFICIENCY = 0.5

EPILOGUES: dict[str, tuple[int, float, float]] = {
    # name: (extra m×n inputs (bias is a vector: 0), flops per element, transcendentals per element)
    "bias": (0, 1.0, 0.0),
    "relu": (0, 1.0, 0.0),
    "gelu": (0, 8.0, 1.0),
    "silu": (0, 4.0, 1.0),
    "sigmoid": (0, 3.0, 1.0),
    "residual": (1, 1.0, 0.0),
}


def _aligned(dim: Num, elem_bytes: float, alignment_bytes: int) -> Bool:
    out: Bool = (dim * elem_bytes) % alignment_bytes == 0
    return out


class _TileSearch:
    """The tile and split a library picks for the output tiles of a matmul on one device: every (candidate tile,
    `SPLIT_K` split) pair costed as whole waves of tiles over the device's slots, the least total of math and exposed
    time taken, the first of equals (a library heuristic's pick)."""

    def __init__(
        self, hw: Hardware, peak: float, s_in: float, s_out: float, pairs: list[tuple[int, int]],
        splits: tuple[int, ...] = SPLIT_K, k_tile: float = 0.0, s_weight: float | None = None,
    ) -> None:  # fmt: skip
        self.launch_s, self.peak, self.s_in, self.s_out, self.pairs = hw.launch_s, peak, s_in, s_out, pairs
        self.s_weight = s_in if s_weight is None else s_weight
        # A product whose main loop waits `step_s` per `k_tile`-deep k-tile (a block-scaled fp4 product); 0: none.
        self.k_tile, self.step_s = k_tile, (hw.block_scaled_step_s if k_tile > 0.0 else 0.0)
        self.splits, self.split_grid = splits, np.asarray(splits, dtype=np.float64)
        self.slots = hw.units * hw.concurrent_tiles_per_unit
        self.bw = hw.memory_bytes_per_s * hw.eff_memory
        # A warm scope (`Hardware.warm_cache`, or `warm_operands` for products): a product whose operands and output
        # fit in the last-level cache finds its first k-step there and stores its tiles there (NVIDIA's L2 is the
        # point of coherence and writes back: a store completes in L2), so a wave's exposed traffic moves at the
        # L2's rate, as its memory time does (`roofline._kernels._warm`); never slower than device memory.
        l2 = hw.shared_l2_read_bytes_per_s
        warm = (hw.warm_cache or hw.warm_operands) and l2 is not None and l2 > hw.memory_bytes_per_s
        self.cache_bytes = hw.cache_bytes if warm else 0.0  # 0: the waits stay at device memory's rate
        self.warm_bw = max(self.bw, (l2 or 0.0) * hw.eff_memory)

    def exposed_bandwidth(self, m: Num, n: Num, k: Num, b: Num, xp: _num.Ops) -> Num:
        """The rate a wave's first k-step and tile stores move at: the L2's where the product fits in a warm scope
        (`__init__`), device memory's otherwise."""
        if self.cache_bytes <= 0.0:
            return self.bw
        size = b * (self.s_in * m * k + self.s_weight * k * n + self.s_out * m * n)
        return xp.where(size <= self.cache_bytes, self.warm_bw, self.bw)

    @staticmethod
    def output_tiles(tm: Num, tn: Num, m: Num, n: Num, b: Num, xp: _num.Ops) -> Num:
        return b * xp.ceil(m / tm) * xp.ceil(n / tn)

    def partial_sums_s(self, split: Num, m: Num, n: Num, b: Num) -> Num:
        """The second kernel of a split: it reads and writes the split's fp32 partial outputs."""
        return 2.0 * PARTIAL_BYTES * split * b * m * n / self.bw

    def cost(
        self, tm: Num, tn: Num, split: Num, m: Num, n: Num, k: Num, b: Num, eff: Num, xp: _num.Ops
    ) -> tuple[Num, Num, Num, Num]:
        """Work units, waves, math time and exposed time of tm × tn output tiles over k split `split` ways."""
        slots, s_in = self.slots, self.s_in
        bw = self.exposed_bandwidth(m, n, k, b, xp)
        out_tiles = self.output_tiles(tm, tn, m, n, b, xp)
        depth = xp.ceil(k / split)
        tiles = out_tiles * split
        waves = xp.ceil(tiles / slots)
        # One wave: every slot computes a tm × tn tile over its k slice (2·tm·tn·depth FLOPs) at peak / slots, and
        # never faster than its k-tiles' waits.
        seconds = waves * slots * 2.0 * tm * tn * depth / (self.peak * eff)
        if self.step_s > 0.0:
            seconds = xp.maximum(seconds, waves * xp.ceil(depth / self.k_tile) * self.step_s)
        is_split = split > 1
        out_size = xp.where(is_split, PARTIAL_BYTES, self.s_out)
        tile_bytes = (tm + tn) * xp.minimum(depth, K_STEP) * s_in + tm * tn * out_size
        exposed = waves * tile_bytes * xp.minimum(tiles, slots) / bw
        # Split: the partial tiles are summed by a second kernel (`launches`), which reads and writes them; only an
        # under-filled grid is split.
        seconds = xp.where(is_split, seconds + self.partial_sums_s(split, m, n, b), seconds)
        exposed = xp.where(is_split, xp.where(out_tiles < slots, exposed + self.launch_s, math.inf), exposed)
        return tiles, waves, seconds, exposed

    def pick(self, m: Num, n: Num, k: Num, b: Num, eff: Num, point: bool) -> tuple[Num, Num, Num]:
        """The winner's tile rows, tile columns and split, per point: floats for one point (`roofline._num`)."""
        pairs = self.pairs
        shape = () if point else np.broadcast_shapes(np.shape(m), np.shape(n), np.shape(k), np.shape(b))
        size = math.prod(shape)
        pick: int | NDArray[np.intp]
        if point:
            pick = self.fastest_point(m, n, k, b, eff)
        elif size <= _SEARCH_CHUNK:
            pick = self.fastest(shape, m, n, k, b, eff)
        else:  # chunks of points, so that the grid's temporaries stay in cache (twice as fast at 10 000 points)
            flat = [np.broadcast_to(x, shape).reshape(-1) for x in (m, n, k, b, eff)]
            chunks = [(i, min(i + _SEARCH_CHUNK, size)) for i in range(0, size, _SEARCH_CHUNK)]
            pick = np.concatenate([self.fastest((j - i,), *(x[i:j] for x in flat)) for i, j in chunks]).reshape(shape)
        if point:
            choice_at, split_at = divmod(int(pick), len(self.splits))
            return float(pairs[choice_at][0]), float(pairs[choice_at][1]), float(self.splits[split_at])
        candidates = np.asarray(pairs, dtype=np.float64)
        choice, split_index = np.divmod(pick, len(self.splits))
        return arr(candidates[choice, 0]), arr(candidates[choice, 1]), arr(self.split_grid[split_index])

    def fastest(self, grid_shape: tuple[int, ...], *sizes: Num) -> NDArray[np.intp]:
        """Index of the first least total over every (candidate, split) pair, a library's pick, as c·splits + s: the
        pairs on two leading axes, the points (`sizes`: m, n, k, b, eff, broadcasting to `grid_shape`) after them."""
        candidates = np.asarray(self.pairs, dtype=np.float64)
        ones = (1,) * len(grid_shape)
        tm, tn = candidates[:, 0].reshape(-1, 1, *ones), candidates[:, 1].reshape(-1, 1, *ones)
        m, n, k, b, eff = sizes
        splits = self.split_grid.reshape(1, -1, *ones)
        _, _, grid_s, grid_exposed = self.cost(tm, tn, splits, m, n, k, b, eff, _num.ARRAYS)
        total = np.broadcast_to(grid_s + grid_exposed, (len(candidates), len(self.splits), *grid_shape))
        out: NDArray[np.intp] = np.argmin(total.reshape(len(candidates) * len(self.splits), -1), axis=0)
        return out.reshape(grid_shape)

    def fastest_point(self, m: Num, n: Num, k: Num, b: Num, eff: Num) -> int:
        """`fastest` for one point in floats: the first least total over the same (candidate, split) pairs. A split
        is considered only where the grid is under-filled (elsewhere `cost` makes it infinite, never the least).

        Pairs that cannot win are not costed (branch and bound): every pair computes at least its output tiles'
        whole k loop, work = out_tiles·2·tm·tn·k / (peak·eff) (waves·slots ≥ tiles, split·⌈k/split⌉ ≥ k), and a
        split adds its second launch and its partial sums, which grow with the split. A bound at or above the best
        total so far rules the pair out, and for a split every deeper one; candidates are visited by increasing
        work, so the best is found early. `_BOUND_MARGIN` keeps rounding from lifting a bound above the total it
        bounds, so a pair ruled out is strictly slower, and ties go to the first pair in the grid's order."""
        pairs, peak, slots = self.pairs, self.peak, self.slots
        works = []
        for tm, tn in pairs:
            out_tiles = self.output_tiles(tm, tn, m, n, b, _num.FLOATS)
            works.append((out_tiles * 2.0 * tm * tn * k / (peak * eff) * _BOUND_MARGIN, out_tiles))
        best_at, best_total = 0, math.inf
        for c in sorted(range(len(pairs)), key=lambda c: works[c][0]):
            (tm, tn), (work, out_tiles) = pairs[c], works[c]
            if work >= best_total:
                break  # and every later candidate: its work is no less
            for s, split in enumerate(self.splits if out_tiles < slots else self.splits[:1]):
                if s and work + (self.launch_s + self.partial_sums_s(split, m, n, b)) * _BOUND_MARGIN >= best_total:
                    break
                _, _, seconds, exposed = self.cost(tm, tn, split, m, n, k, b, eff, _num.FLOATS)
                total, at = float(seconds + exposed), c * len(self.splits) + s
                if total < best_total or (total == best_total and at < best_at):
                    best_at, best_total = at, total
        return best_at


def matmul(
    hw: Hardware,
    m: Num,
    n: Num,
    k: Num,
    batch: Num = 1.0,
    dtype: str = "bf16",
    out_dtype: str | None = None,
    tile: tuple[int, int] | None = None,
    epilogue: tuple[str, ...] = (),
    fuse_epilogue: bool = True,
    precision: str = "default",
    quantization: str = "none",
    input_quantized: bool = False,
    may_split_k: bool = True,
) -> list[Kernel]:
    """C[b, m, n] = A[b, m, k] · B[b, k, n], with an optional elementwise epilogue on C.

    `quantization` (`roofline.ops.QUANTIZATIONS`): A arrives in `dtype` (16-bit) and is quantised by its own kernels
    before a product at the scheme's narrow type, whose B (the weights) is stored quantised with its scales; C is
    written in `out_dtype` or `dtype`. "none": the product runs at `dtype`. `input_quantized`: A arrives already
    quantised (the kernel before wrote it narrow, as a fused MoE's expand kernel does): no quantise kernels.
    `may_split_k`: False for a library whose configurations never split k (a fused MoE's grouped GEMMs).

    Matrix efficiency is the device's bf16 figure times the narrow types' own factor (`Hardware.matmul_efficiency`:
    fp8, fp8 with block scales, fp4).

    fp32 inputs run at `precision` (`roofline.ops.PRECISIONS`; `matmul_rate`): under "default" as JAX/XLA run them
    (TF32 on a GPU that has it, one bf16 pass on a TPU), "highest" in full fp32 (PyTorch's default).

    FLOPs = 2·b·m·n·k; ideal bytes = size(in)·b·(m·k + k·n) + size(out)·b·m·n. Math time is quantized: with output
    tiles tm × tn, tiles = b·⌈m/tm⌉·⌈n/tn⌉ run in waves of units × concurrent tiles, each wave taking one tile's
    time; the tile is the candidate with the least time, as a library heuristic picks (or `tile` if given). A grid
    of fewer tiles than slots may split k (`SPLIT_K`): `tiles` then counts s·tiles work units of depth ⌈k/s⌉, and
    the s fp32 partial outputs are summed by a second kernel (they stay in L2, so they are not device-memory bytes;
    their traffic is timed at device bandwidth, conservatively). Each wave also waits for its first k-step and for
    the store of its tiles (`K_STEP`): `exposed_s`, added to the math on the compute units' timeline.
    """
    m, n, k, b = _num.num(m), _num.num(n), _num.num(k), _num.num(batch)
    s_out = dtype_bytes(out_dtype or dtype)
    before: list[Kernel] = []
    splits: tuple[int, ...] = SPLIT_K
    min_tile_m = 0
    product = dtype  # the type the product runs at
    if quantization == "none":
        s_in = s_weight = dtype_bytes(dtype)
        s_packed = value_bytes(dtype)
        peak, unit, algorithm = matmul_rate(hw, dtype, precision)
        efficiency_key = algorithm
    else:
        q = _quantization(quantization)
        # A weight-only scheme keeps the 16-bit input and runs the product at its type (dequantising the weights).
        product = q.dtype if q.quantizes_input else dtype
        before = [] if input_quantized else quantize_input(hw, b * m * k, q, dtype_bytes(dtype))
        s_in, s_weight = dtype_bytes(product), q.weight_bytes
        s_packed = q.out_bytes if q.quantizes_input else dtype_bytes(dtype)
        peak, unit = hw.matrix_peak(product)
        algorithm, efficiency_key = quantization, (q.efficiency if q.quantizes_input else product)
        splits, min_tile_m = (SPLIT_K if q.split_k else SPLIT_K[:1]), q.min_tile_m
    if not may_split_k:
        splits = SPLIT_K[:1]
    k_tile = float(BLOCK_SCALED_FP4_K_TILE.get(hw.architecture or "", 0)) if product == "fp4" else 0.0
    if k_tile > 0.0:  # a 4-bit product runs as NVFP4 does, quantised input or not: no split-K, 128-row tiles
        nvfp4 = _quantization("nvfp4")
        splits, min_tile_m = SPLIT_K[:1], max(min_tile_m, nvfp4.min_tile_m)
    # Rows are aligned by their packed values (an NVFP4 row's scales are stored apart).
    aligned = _aligned(k, s_packed, hw.alignment_bytes) & _aligned(n, s_packed, hw.alignment_bytes)
    eff = hw.matmul_efficiency(efficiency_key) * _num.where(aligned, 1.0, MISALIGNED_EFFICIENCY)
    fixed = FIXED_TILES.get((quantization, hw.architecture or ""))
    if tile is None and fixed is not None:
        tile = fixed
    pairs = [tile] if tile is not None else [t for t in hw.tiles if t[0] >= min_tile_m] or [max(hw.tiles)]
    search = _TileSearch(hw, peak, s_in, s_out, pairs, splits, k_tile, s_weight)
    slots = search.slots
    point = _num.is_point(m, n, k, b)
    tile_m, tile_n, split_k = search.pick(m, n, k, b, eff, point)
    # The winner's figures, computed again from its tile and split alone: the same arithmetic on the same numbers
    # (identical), and cheaper than gathering them from the grid.
    xp = _num.FLOATS if point else _num.ARRAYS
    tiles, waves, best_s, exposed_s = search.cost(tile_m, tile_n, split_k, m, n, k, b, eff, xp)
    best = {"tiles": tiles, "waves": waves, "tile_m": tile_m, "tile_n": tile_n, "split_k": split_k}
    exposed_s = exposed_s - _num.where(split_k > 1, hw.launch_s, 0.0)  # the second launch is counted apart
    flops = 2.0 * b * m * n * k
    wave_eff = best["tiles"] / (best["waves"] * slots)

    out_elems = b * m * n
    a_bytes, b_bytes = s_in * b * m * k, s_weight * b * k * n
    main = Kernel(
        flops=flops,
        matrix_s=best_s,
        vector_flops=0.0,
        sfu_ops=0.0,
        external_in_bytes=a_bytes + b_bytes,
        chained_in_bytes=0.0,
        out_bytes=s_out * out_elems,
        peak=peak,
        unit=unit,
        consumes_whole_input=True,
        exposed_s=exposed_s,
        operand_stream=True,
        launches=_num.where(split_k > 1, 2.0, 1.0),
        extra={**best, "wave_efficiency": wave_eff, "aligned": _num.where(aligned, 1.0, 0.0), "exposed_s": exposed_s},
        assumptions={"tile_choice": "fixed" if tile is not None else "fastest candidate", "algorithm": str(algorithm)},
    )
    main.extra["a_bytes"], main.extra["b_bytes"] = a_bytes, b_bytes
    kernels = [*before, main]
    for name in epilogue:
        extra_inputs, fpe, tpe = EPILOGUES[name]
        extra_in = s_out * out_elems * extra_inputs + (s_out * b * n if name == "bias" else 0.0)
        if fuse_epilogue:
            main.flops = main.flops + fpe * out_elems
            main.vector_flops = main.vector_flops + fpe * out_elems
            main.sfu_ops = main.sfu_ops + tpe * out_elems
            main.external_in_bytes = main.external_in_bytes + extra_in
        else:
            kernels.append(
                elementwise_kernel(
                    hw,
                    out_elems,
                    fpe,
                    tpe,
                    extra_in,
                    s_out * out_elems,
                    s_out * out_elems,
                    s_out,
                    streams=1.0 + extra_inputs,
                )
            )
    return kernels
