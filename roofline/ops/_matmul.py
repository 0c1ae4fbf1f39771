"""Matrix products, vectorised over shapes: the type a product runs at, its efficiency, the tile and split the
library's search picks (`roofline.ops._tile_search`), its kernel and its epilogue."""

from __future__ import annotations

from dataclasses import dataclass

from roofline import _num
from roofline._estimate import Num
from roofline._hardware import Hardware, dtype_bytes, value_bytes
from roofline._kernels import Kernel
from roofline._num import Bool
from roofline.ops._memory_bound import elementwise_kernel
from roofline.ops._precision import matmul_rate
from roofline.ops._quantize import BLOCK_SCALED_FP4_K_TILE, FIXED_TILES, quantize_input
from roofline.ops._quantize import quantization as _quantization
from roofline.ops._tile_search import SPLIT_K, TileSearch

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


# The records `matmul`'s steps pass: slotted dataclasses, never changed once built, not frozen ones: a frozen
# dataclass sets each field through object.__setattr__, about four times the build time, and a point's estimate is a
# budget of microseconds (`roofline._num`).
@dataclass(slots=True)
class _Dims:
    """The product's sizes: C[b, m, n] = A[b, m, k] · B[b, k, n]."""

    m: Num
    n: Num
    k: Num
    b: Num


@dataclass(slots=True)
class _Operands:
    """What the product runs at: bytes per element of A (`s_in`), of B with its scales (`s_weight`) and of a row's
    packed values (`s_packed`, which set its alignment), its peak, unit, algorithm and `matmul_efficiency` key, the
    k splits its library may take, its smallest tile height and its block-scaled k-tile (0: none)."""

    s_in: float
    s_weight: float
    s_packed: float
    peak: float
    unit: str
    algorithm: str
    efficiency_key: str
    splits: tuple[int, ...]
    min_tile_m: int
    k_tile: float


@dataclass(slots=True)
class _Winner:
    """The picked tile and split and their figures: work units, waves, math time and exposed time."""

    tile_m: Num
    tile_n: Num
    split_k: Num
    tiles: Num
    waves: Num
    seconds: Num
    exposed_s: Num


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
    dims = _Dims(_num.num(m), _num.num(n), _num.num(k), _num.num(batch))
    s_out = dtype_bytes(out_dtype or dtype)
    ops = _operands(hw, dtype, precision, quantization, may_split_k)
    before = _input_quantization(hw, dims, dtype, quantization, input_quantized)
    eff, aligned = _efficiency(hw, ops, dims)
    tile = _fixed_tile(hw, tile, quantization)
    search = TileSearch(hw, ops.peak, ops.s_in, s_out, _candidates(hw, tile, ops.min_tile_m), ops.splits,
                         ops.k_tile, ops.s_weight)  # fmt: skip
    main = _product_kernel(hw, dims, ops, _winner(search, dims, eff), aligned, s_out, fixed=tile is not None)
    return [*before, main, *_epilogues(hw, main, dims, epilogue, fuse_epilogue, s_out)]


def _operands(hw: Hardware, dtype: str, precision: str, quantization: str, may_split_k: bool) -> _Operands:
    """The type the product runs at and what its operands, rate and splits are (`matmul`'s `quantization`)."""
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
    return _Operands(s_in, s_weight, s_packed, peak, unit, str(algorithm), efficiency_key, splits,
                     min_tile_m, k_tile)  # fmt: skip


def _input_quantization(
    hw: Hardware, dims: _Dims, dtype: str, quantization: str, input_quantized: bool
) -> list[Kernel]:
    """The kernels that quantise A before a narrow product: none for "none" or an input that arrives quantised."""
    if quantization == "none" or input_quantized:
        return []
    return quantize_input(hw, dims.b * dims.m * dims.k, _quantization(quantization), dtype_bytes(dtype))


def _efficiency(hw: Hardware, ops: _Operands, dims: _Dims) -> tuple[Num, Bool]:
    """Matrix efficiency of the product (`MISALIGNED_EFFICIENCY` off the vector width), and whether it is aligned."""
    # Rows are aligned by their packed values (an NVFP4 row's scales are stored apart).
    aligned = _aligned(dims.k, ops.s_packed, hw.alignment_bytes) & _aligned(dims.n, ops.s_packed, hw.alignment_bytes)
    eff = hw.matmul_efficiency(ops.efficiency_key) * _num.where(aligned, 1.0, MISALIGNED_EFFICIENCY)
    return eff, aligned


def _fixed_tile(hw: Hardware, tile: tuple[int, int] | None, quantization: str) -> tuple[int, int] | None:
    """`tile` if given, else the scheme's one kernel's tile on this architecture (`FIXED_TILES`), else None."""
    fixed = FIXED_TILES.get((quantization, hw.architecture or ""))
    if tile is None and fixed is not None:
        return fixed
    return tile


def _candidates(hw: Hardware, tile: tuple[int, int] | None, min_tile_m: int) -> list[tuple[int, int]]:
    """The output tiles the search picks among: a fixed `tile` alone, else the profile's tiles at least
    `min_tile_m` rows high (its largest when none is)."""
    return [tile] if tile is not None else [t for t in hw.tiles if t[0] >= min_tile_m] or [max(hw.tiles)]


def _winner(search: TileSearch, dims: _Dims, eff: Num) -> _Winner:
    """The tile and split the library picks, floats for one point (`roofline._num`), and their figures."""
    m, n, k, b = dims.m, dims.n, dims.k, dims.b
    point = _num.is_point(m, n, k, b)
    tile_m, tile_n, split_k = search.pick(m, n, k, b, eff, point)
    # The winner's figures, computed again from its tile and split alone: the same arithmetic on the same numbers
    # (identical), and cheaper than gathering them from the grid.
    xp = _num.FLOATS if point else _num.ARRAYS
    tiles, waves, seconds, exposed_s = search.cost(tile_m, tile_n, split_k, m, n, k, b, eff, xp)
    return _Winner(tile_m, tile_n, split_k, tiles, waves, seconds, exposed_s)


def _product_kernel(
    hw: Hardware, dims: _Dims, ops: _Operands, win: _Winner, aligned: Bool, s_out: float, fixed: bool
) -> Kernel:
    """The product's kernel: its FLOPs, operand and output bytes, the winner's math and exposed time."""
    m, n, k, b = dims.m, dims.n, dims.k, dims.b
    best = {"tiles": win.tiles, "waves": win.waves, "tile_m": win.tile_m, "tile_n": win.tile_n, "split_k": win.split_k}
    exposed_s = win.exposed_s - _num.where(win.split_k > 1, hw.launch_s, 0.0)  # the second launch is counted apart
    flops = 2.0 * b * m * n * k
    wave_eff = win.tiles / (win.waves * (hw.units * hw.concurrent_tiles_per_unit))
    a_bytes, b_bytes = ops.s_in * b * m * k, ops.s_weight * b * k * n
    main = Kernel(
        flops=flops,
        matrix_s=win.seconds,
        vector_flops=0.0,
        sfu_ops=0.0,
        external_in_bytes=a_bytes + b_bytes,
        chained_in_bytes=0.0,
        out_bytes=s_out * (b * m * n),
        peak=ops.peak,
        unit=ops.unit,
        consumes_whole_input=True,
        exposed_s=exposed_s,
        operand_stream=True,
        launches=_num.where(win.split_k > 1, 2.0, 1.0),
        extra={**best, "wave_efficiency": wave_eff, "aligned": _num.where(aligned, 1.0, 0.0), "exposed_s": exposed_s},
        assumptions={"tile_choice": "fixed" if fixed else "fastest candidate", "algorithm": ops.algorithm},
    )
    main.extra["a_bytes"], main.extra["b_bytes"] = a_bytes, b_bytes
    return main


def _epilogues(
    hw: Hardware, main: Kernel, dims: _Dims, epilogue: tuple[str, ...], fuse: bool, s_out: float
) -> list[Kernel]:
    """The elementwise epilogue on C (`EPILOGUES`): fused into `main` (which it updates), or its own kernels."""
    out_elems = dims.b * dims.m * dims.n
    kernels: list[Kernel] = []
    for name in epilogue:
        extra_inputs, fpe, tpe = EPILOGUES[name]
        extra_in = s_out * out_elems * extra_inputs + (s_out * dims.b * dims.n if name == "bias" else 0.0)
        if fuse:
            main.flops = main.flops + fpe * out_elems
            main.vector_flops = main.vector_flops + fpe * out_elems
            main.sfu_ops = main.sfu_ops + tpe * out_elems
            main.external_in_bytes = main.external_in_bytes + extra_in
        else:
            kernels.append(
                elementwise_kernel(
                    hw, out_elems, fpe, tpe, extra_in, s_out * out_elems, s_out * out_elems, s_out,
                    streams=1.0 + extra_inputs,
                )
            )  # fmt: skip
    return kernels
