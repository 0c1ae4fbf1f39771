"""Per-op FLOPs, bytes and math time, vectorised over numpy arrays of shapes.

Every function takes sizes as arrays (or scalars) that broadcast together and returns the kernels the op runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from roofline import _num
from roofline._alu import alu_cost
from roofline._estimate import Array, Num
from roofline._hardware import Hardware, dtype_bytes
from roofline._kernels import Kernel, arr
from roofline._num import Bool

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

# FLOPs and special-function ops per output element of common activations (forward). Counts follow the usual
# formulas: gelu = 0.5·x·(1 + erf(x/√2)); silu = x·σ(x); swiglu = silu(gate)·up.
ACTIVATIONS: dict[str, tuple[int, float, float]] = {
    # name: (inputs, flops per element, transcendentals per element)
    "relu": (1, 1.0, 0.0),
    "gelu": (1, 8.0, 1.0),
    "gelu_tanh": (1, 9.0, 1.0),
    "silu": (1, 4.0, 1.0),
    "sigmoid": (1, 3.0, 1.0),
    "tanh": (1, 1.0, 1.0),
    "swiglu": (2, 5.0, 1.0),
    "geglu": (2, 9.0, 1.0),
}
EPILOGUES: dict[str, tuple[int, float, float]] = {
    # name: (extra m×n inputs (bias is a vector: 0), flops per element, transcendentals per element)
    "bias": (0, 1.0, 0.0),
    "relu": (0, 1.0, 0.0),
    "gelu": (0, 8.0, 1.0),
    "silu": (0, 4.0, 1.0),
    "sigmoid": (0, 3.0, 1.0),
    "residual": (1, 1.0, 0.0),
}


# How a memory-bound kernel loads device memory: bytes per load per thread. A streaming kernel keeps about one load
# per input stream per thread in flight, so it reaches the bandwidth Little's law allows (`Hardware.parallel_bandwidth`,
# combined with the device bandwidth as `roofline._kernels.MEMORY_QUEUEING_NORM` says).
# "vectorized": 128-bit loads (CUDA C++ Best Practices Guide, coalesced and vectorized access; PyTorch's and
# Triton's elementwise kernels), which come within a few per cent of HBM bandwidth; "scalar": one element per
# load, as simple hand-written kernels do (vLLM/Sarathi's rms_norm, silu_and_mul and rotary kernels index one
# element per thread per loop trip; PyTorch's index_select behind an embedding lookup).
MEMORY_ACCESS: dict[str, float | None] = {"vectorized": 16.0, "scalar": None}  # None: the element size


def _aligned(dim: Num, elem_bytes: float, alignment_bytes: int) -> Bool:
    out: Bool = (dim * elem_bytes) % alignment_bytes == 0
    return out


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
) -> list[Kernel]:
    """C[b, m, n] = A[b, m, k] · B[b, k, n], with an optional elementwise epilogue on C.

    FLOPs = 2·b·m·n·k; ideal bytes = size(in)·b·(m·k + k·n) + size(out)·b·m·n. Math time is quantized: with output
    tiles tm × tn, tiles = b·⌈m/tm⌉·⌈n/tn⌉ run in waves of units × concurrent tiles, each wave taking one tile's
    time; the tile is the candidate with the least time, as a library heuristic picks (or `tile` if given). A grid
    of fewer tiles than slots may split k (`SPLIT_K`): `tiles` then counts s·tiles work units of depth ⌈k/s⌉, and
    the s fp32 partial outputs are summed by a second kernel (they stay in L2, so they are not device-memory bytes;
    their traffic is timed at device bandwidth, conservatively). Each wave also waits for its first k-step and for
    the store of its tiles (`K_STEP`): `exposed_s`, added to the math on the compute units' timeline.
    """
    m, n, k, b = _num.num(m), _num.num(n), _num.num(k), _num.num(batch)
    s_in, s_out = dtype_bytes(dtype), dtype_bytes(out_dtype or dtype)
    peak, unit = hw.matrix_peak(dtype)
    aligned = _aligned(k, s_in, hw.alignment_bytes) & _aligned(n, s_in, hw.alignment_bytes)
    eff = hw.eff_matmul * _num.where(aligned, 1.0, MISALIGNED_EFFICIENCY)
    slots = hw.units * hw.concurrent_tiles_per_unit
    pairs = [tile] if tile is not None else list(hw.tiles)
    bw = hw.memory_bytes_per_s * hw.eff_memory
    point = _num.is_point(m, n, k, b)

    def output_tiles(tm: Num, tn: Num, m: Num, n: Num, b: Num, xp: _num.Ops) -> Num:
        return b * xp.ceil(m / tm) * xp.ceil(n / tn)

    def partial_sums_s(split: Num, m: Num, n: Num, b: Num) -> Num:
        """The second kernel of a split: it reads and writes the split's fp32 partial outputs."""
        return 2.0 * PARTIAL_BYTES * split * b * m * n / bw

    def cost(
        tm: Num,
        tn: Num,
        split: Num,
        m: Num = m,
        n: Num = n,
        k: Num = k,
        b: Num = b,
        eff: Num = eff,
        xp: _num.Ops = _num.FLOATS if point else _num.ARRAYS,
    ) -> tuple[Num, Num, Num, Num]:
        """Work units, waves, math time and exposed time of tm × tn output tiles over k split `split` ways."""
        out_tiles = output_tiles(tm, tn, m, n, b, xp)
        depth = xp.ceil(k / split)
        tiles = out_tiles * split
        waves = xp.ceil(tiles / slots)
        # One wave: every slot computes a tm × tn tile over its k slice (2·tm·tn·depth FLOPs) at peak / slots.
        seconds = waves * slots * 2.0 * tm * tn * depth / (peak * eff)
        is_split = split > 1
        out_size = xp.where(is_split, PARTIAL_BYTES, s_out)
        tile_bytes = (tm + tn) * xp.minimum(depth, K_STEP) * s_in + tm * tn * out_size
        exposed = waves * tile_bytes * xp.minimum(tiles, slots) / bw
        # Split: the partial tiles are summed by a second kernel (`launches`), which reads and writes them; only an
        # under-filled grid is split.
        seconds = xp.where(is_split, seconds + partial_sums_s(split, m, n, b), seconds)
        exposed = xp.where(is_split, xp.where(out_tiles < slots, exposed + hw.launch_s, math.inf), exposed)
        return tiles, waves, seconds, exposed

    def fastest(grid_shape: tuple[int, ...], *sizes: Num) -> NDArray[np.intp]:
        """Index of the first least total over every (candidate, split) pair, a library's pick, as c·splits + s: the
        pairs on two leading axes, the points (`sizes`, broadcasting to `grid_shape`) after them."""
        candidates = np.asarray(pairs, dtype=np.float64)
        ones = (1,) * len(grid_shape)
        tm, tn = candidates[:, 0].reshape(-1, 1, *ones), candidates[:, 1].reshape(-1, 1, *ones)
        m, n, k, b, eff = sizes
        _, _, grid_s, grid_exposed = cost(tm, tn, _SPLITS.reshape(1, -1, *ones), m, n, k, b, eff, _num.ARRAYS)
        total = np.broadcast_to(grid_s + grid_exposed, (len(candidates), len(SPLIT_K), *grid_shape))
        out: NDArray[np.intp] = np.argmin(total.reshape(len(candidates) * len(SPLIT_K), -1), axis=0)
        return out.reshape(grid_shape)

    def fastest_point() -> int:
        """`fastest` for one point in floats: the first least total over the same (candidate, split) pairs. A split
        is considered only where the grid is under-filled (elsewhere `cost` makes it infinite, never the least).

        Pairs that cannot win are not costed (branch and bound): every pair computes at least its output tiles'
        whole k loop, work = out_tiles·2·tm·tn·k / (peak·eff) (waves·slots ≥ tiles, split·⌈k/split⌉ ≥ k), and a
        split adds its second launch and its partial sums, which grow with the split. A bound at or above the best
        total so far rules the pair out, and for a split every deeper one; candidates are visited by increasing
        work, so the best is found early. `_BOUND_MARGIN` keeps rounding from lifting a bound above the total it
        bounds, so a pair ruled out is strictly slower, and ties go to the first pair in the grid's order."""
        works = []
        for tm, tn in pairs:
            out_tiles = output_tiles(tm, tn, m, n, b, _num.FLOATS)
            works.append((out_tiles * 2.0 * tm * tn * k / (peak * eff) * _BOUND_MARGIN, out_tiles))
        best_at, best_total = 0, math.inf
        for c in sorted(range(len(pairs)), key=lambda c: works[c][0]):
            (tm, tn), (work, out_tiles) = pairs[c], works[c]
            if work >= best_total:
                break  # and every later candidate: its work is no less
            for s, split in enumerate(SPLIT_K if out_tiles < slots else SPLIT_K[:1]):
                if s and work + (hw.launch_s + partial_sums_s(split, m, n, b)) * _BOUND_MARGIN >= best_total:
                    break
                _, _, seconds, exposed = cost(tm, tn, split)
                total, at = float(seconds + exposed), c * len(SPLIT_K) + s
                if total < best_total or (total == best_total and at < best_at):
                    best_at, best_total = at, total
        return best_at

    shape = () if point else np.broadcast_shapes(np.shape(m), np.shape(n), np.shape(k), np.shape(b))
    size = math.prod(shape)
    pick: int | NDArray[np.intp]
    if point:
        pick = fastest_point()
    elif size <= _SEARCH_CHUNK:
        pick = fastest(shape, m, n, k, b, eff)
    else:  # chunks of points, so that the grid's temporaries stay in cache (twice as fast at 10 000 points)
        flat = [np.broadcast_to(x, shape).reshape(-1) for x in (m, n, k, b, eff)]
        chunks = [(i, min(i + _SEARCH_CHUNK, size)) for i in range(0, size, _SEARCH_CHUNK)]
        pick = np.concatenate([fastest((j - i,), *(x[i:j] for x in flat)) for i, j in chunks]).reshape(shape)
    # The winner's figures, computed again from its tile and split alone: the same arithmetic on the same numbers
    # (identical), and cheaper than gathering them from the grid.
    tile_m: Num
    tile_n: Num
    split_k: Num
    if point:  # one point: its figures in floats (`roofline._num`)
        choice_at, split_at = divmod(int(pick), len(SPLIT_K))
        tile_m, tile_n = float(pairs[choice_at][0]), float(pairs[choice_at][1])
        split_k = float(SPLIT_K[split_at])
    else:
        candidates = np.asarray(pairs, dtype=np.float64)
        choice, split_index = np.divmod(pick, len(SPLIT_K))
        tile_m, tile_n, split_k = arr(candidates[choice, 0]), arr(candidates[choice, 1]), arr(_SPLITS[split_index])
    tiles, waves, best_s, exposed_s = cost(tile_m, tile_n, split_k)
    best = {"tiles": tiles, "waves": waves, "tile_m": tile_m, "tile_n": tile_n, "split_k": split_k}
    exposed_s = exposed_s - _num.where(split_k > 1, hw.launch_s, 0.0)  # the second launch is counted apart
    flops = 2.0 * b * m * n * k
    wave_eff = best["tiles"] / (best["waves"] * slots)

    out_elems = b * m * n
    a_bytes, b_bytes = s_in * b * m * k, s_in * b * k * n
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
        launches=_num.where(split_k > 1, 2.0, 1.0),
        extra={**best, "wave_efficiency": wave_eff, "aligned": _num.where(aligned, 1.0, 0.0), "exposed_s": exposed_s},
        assumptions={"tile_choice": "fixed" if tile is not None else "fastest candidate"},
    )
    main.extra["a_bytes"], main.extra["b_bytes"] = a_bytes, b_bytes
    kernels = [main]
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
                _elementwise_kernel(
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


def _elementwise_kernel(
    hw: Hardware,
    elements: Num,
    fpe: float | Array,
    tpe: float | Array,
    external: Array | float,
    chained: Array | float,
    out: Array | float,
    element_bytes: float = 2.0,
    access: str = "vectorized",
    dependent_loads: float = 1.0,
    streams: float = 1.0,
) -> Kernel:
    """A memory-bound kernel over `elements`. Every thread keeps one load per input stream in flight (`streams`: the
    inputs of an add, a gated activation's gate and up, rotary's pair of elements, all issued before any is used):
    one element each (scalar) or one 128-bit vector each (vectorized)."""
    flops = arr(fpe) * elements
    try:
        width = (MEMORY_ACCESS[access] or element_bytes) * streams
    except KeyError:
        raise ValueError(f"unknown memory access {access!r}; known: {', '.join(MEMORY_ACCESS)}") from None
    return Kernel(
        access_bytes=width,
        dependent_loads=dependent_loads,
        flops=flops,
        matrix_s=np.zeros(()),
        vector_flops=flops,
        sfu_ops=arr(tpe) * elements,
        external_in_bytes=arr(external),
        chained_in_bytes=arr(chained),
        out_bytes=arr(out),
        peak=np.asarray(hw.vector_peak("fp32")),
        unit="vector",
    )


def elementwise(
    hw: Hardware,
    elements: Array,
    inputs: Array | float = 1,
    outputs: Array | float = 1,
    flops_per_element: Array | float = 1.0,
    transcendentals_per_element: Array | float = 0.0,
    dtype: str = "bf16",
    chained_inputs: Array | float = 1,
    access: str = "vectorized",
    functions: Sequence[str] = (),
) -> list[Kernel]:
    """y = f(x₁ … xᵢ) over `elements`: reads inputs, writes outputs, once each.

    Inside a chain, `chained_inputs` of the inputs are the outputs of earlier ops (or re-reads of the chain's input)
    and stay on chip when the chain is fused. `functions` (exp, tanh, sin …, each applied once per element) add
    XLA's measured ALU cost per element on this device's architecture (`roofline._alu`) to `flops_per_element`.
    """
    e, s = arr(elements), dtype_bytes(dtype)
    ins = arr(inputs)
    chained = np.minimum(arr(chained_inputs), ins)
    costs = [alu_cost(fn, dtype, hw.architecture) for fn in functions]
    fpe = arr(flops_per_element) + sum(cost for cost, _ in costs)
    kernel = _elementwise_kernel(
        hw,
        e,
        fpe,
        transcendentals_per_element,
        s * e * (ins - chained),
        s * e * chained,
        s * e * arr(outputs),
        s,
        access,
        streams=max(1.0, float(np.min(ins))),  # one load per input in flight (the fewest, for a sweep over inputs)
    )
    if costs:
        kernel.assumptions["alu_costs"] = [source for _, source in costs]
    return [kernel]


def activation(
    hw: Hardware, elements: Array, function: str, dtype: str = "bf16", access: str = "vectorized"
) -> list[Kernel]:
    """relu, gelu, silu, sigmoid, tanh, or a gated pair (swiglu, geglu: two inputs, one output)."""
    inputs, fpe, tpe = ACTIVATIONS[function]
    e, s = arr(elements), dtype_bytes(dtype)
    return [_elementwise_kernel(hw, e, fpe, tpe, s * e * (inputs - 1), s * e, s * e, s, access, streams=inputs)]


def reduction(hw: Hardware, rows: Array, cols: Array, dtype: str = "bf16", access: str = "vectorized") -> list[Kernel]:
    """Sum (or max) over the last axis: reads rows·cols, writes rows."""
    r, c, s = arr(rows), arr(cols), dtype_bytes(dtype)
    return [_elementwise_kernel(hw, r * c, 1.0, 0.0, 0.0, s * r * c, s * r, s, access)]


def softmax(
    hw: Hardware, rows: Array, cols: Array, dtype: str = "bf16", online: bool = True, access: str = "vectorized"
) -> list[Kernel]:
    """Softmax over the last axis. Online (Milakov & Gimelshein 2018): one read pass computing the running max and
    sum, one normalising pass over the row held on chip; multi-pass: max, then exp-sum, then normalise, each
    reading the input from device memory (3 reads, 1 write)."""
    r, c, s = arr(rows), arr(cols), dtype_bytes(dtype)
    reads = 1.0 if online else 3.0
    tpe = 1.0 if online else 2.0  # the multi-pass form computes exp in the sum pass and again when normalising
    return [_elementwise_kernel(hw, r * c, 5.0, tpe, s * r * c * (reads - 1), s * r * c, s * r * c, s, access)]


# PyTorch's vectorized layer norm (aten/src/ATen/native/cuda/layer_norm_kernel.cu, `vectorized_layer_norm_kernel`,
# the path for contiguous, aligned rows whose length is a multiple of `vec_size`): one thread block of
# `num_threads()` = 128 threads (ATen/native/cuda/thread_constants.h) per row; each thread loads `vec_size` = 4
# elements at a time ("we could make it dependent on dtype, but that would lead to different results"), first
# accumulating Welford statistics over the row, then, after the block reduction, reading the row again (with the
# scale and shift) to write y. RL-ASSUME: the trips of each pass wait for their load one after another (the Welford
# update carries the running mean and count through a reciprocal from one element to the next). Measured: one
# 2560-wide fp16 row takes ~5 µs of kernel time on A100 (vidur, Phi-2, T = 1), the time of its 10 trips at the
# loaded latency, where a bandwidth or Little's-law view of 10 KB says well under a microsecond.
LAYERNORM_BLOCK_THREADS = 128
LAYERNORM_VECTOR_ELEMENTS = 4


def layernorm(
    hw: Hardware, rows: Array, cols: Array, dtype: str = "bf16", rms: bool = False, access: str = "vectorized"
) -> list[Kernel]:
    """Layer norm (Ba et al. 2016) or RMS norm (Zhang & Sennrich 2019), fused: read x once, write y once, plus
    the scale (and shift) vectors; statistics in fp32 on chip.

    A vectorized layer norm is PyTorch's kernel (`LAYERNORM_BLOCK_THREADS`): a block per row reads it twice, so
    each thread makes 2·⌈cols / (128·4)⌉ trips in series (`Kernel.serial_loads`), 4 elements per load. Its second
    read comes from L2 while the rows of every resident block fit there; beyond that (rows of 16 K fp16 elements
    and more on A100) it comes from device memory again.
    """
    r, c, s = arr(rows), arr(cols), dtype_bytes(dtype)
    params = (1.0 if rms else 2.0) * s * c
    fpe = 4.0 if rms else 8.0
    if rms or access != "vectorized":
        kernel = _elementwise_kernel(hw, r * c, fpe, 0.0, params, s * r * c, s * r * c, s, access)
        kernel.sfu_ops = r  # one rsqrt per row
        return [kernel]
    resident_rows = np.minimum(r, hw.units * (hw.threads_per_unit or 0) / LAYERNORM_BLOCK_THREADS)
    spills = resident_rows * c * s > hw.cache_bytes
    reread = np.where(spills, s * r * c, 0.0)
    kernel = _elementwise_kernel(hw, r * c, fpe, 0.0, params + reread, s * r * c, s * r * c, s, access)
    kernel.access_bytes = LAYERNORM_VECTOR_ELEMENTS * s
    kernel.serial_loads = 2.0 * np.ceil(c / (LAYERNORM_BLOCK_THREADS * LAYERNORM_VECTOR_ELEMENTS))
    kernel.sfu_ops = r  # one rsqrt per row
    kernel.extra = {"second_read_from_memory": spills.astype(np.float64)}
    return [kernel]


def rotary(
    hw: Hardware, tokens: Array, heads: Array, head_dim: Array, dtype: str = "bf16", access: str = "vectorized"
) -> list[Kernel]:
    """Rotary position embedding (Su et al. 2021) on one tensor of tokens × heads × head_dim: each pair of
    elements is rotated (4 multiplies, 2 adds per pair = 3 FLOPs per element); cos/sin tables are read once."""
    t, h, d, s = arr(tokens), arr(heads), arr(head_dim), dtype_bytes(dtype)
    elements = t * h * d
    tables = 2.0 * s * t * d / 2.0
    return [_elementwise_kernel(hw, elements, 3.0, 0.0, tables, s * elements, s * elements, s, access, streams=2.0)]


def embedding(
    hw: Hardware, tokens: Array, hidden: Array, vocab: Array, dtype: str = "bf16", access: str = "vectorized"
) -> list[Kernel]:
    """Gather `tokens` rows of a vocab × hidden table: reads the rows it needs (never the whole table) and the
    int32 token ids, writes tokens × hidden. No math. Each row load waits for its token id: two loads in series."""
    t, h, s = arr(tokens), arr(hidden), dtype_bytes(dtype)
    _ = vocab  # the table size does not move bytes; rows are gathered
    return [_elementwise_kernel(hw, t * h, 0.0, 0.0, 4.0 * t, s * t * h, s * t * h, s, access, dependent_loads=2.0)]


def cross_entropy(
    hw: Hardware, tokens: Array, vocab: Array, dtype: str = "bf16", access: str = "vectorized"
) -> list[Kernel]:
    """Loss from logits [tokens, vocab] with an online log-sum-exp: one read of the logits, fp32 loss per token."""
    t, v, s = arr(tokens), arr(vocab), dtype_bytes(dtype)
    return [_elementwise_kernel(hw, t * v, 4.0, 1.0, 4.0 * t, s * t * v, 4.0 * t, s, access)]


def causal_pairs(q_len: Num, kv_len: Num) -> Num:
    """Query-key pairs a causal mask keeps when the q_len queries are the last of kv_len positions:
    q·(kv − q) + q·(q + 1)/2."""
    q, kv = _num.num(q_len), _num.num(kv_len)
    return q * (kv - q) + q * (q + 1.0) / 2.0


def attention(
    hw: Hardware,
    batch: Num,
    heads: Num,
    kv_heads: Num,
    head_dim: Num,
    q_len: Num,
    kv_len: Num,
    causal: bool = True,
    implementation: str = "flash",
    dtype: str = "bf16",
) -> list[Kernel]:
    """softmax(Q·Kᵀ/√d)·V for batch × heads queries of length q_len over kv_len keys (MHA, GQA or MQA).

    FLOPs: 4·b·h·pairs·d for the two products (pairs = q·kv, or the causal count for flash, which skips masked
    blocks; the naive form computes the full matrix and masks it). Bytes:
    - naive: Q, K, V, O once, plus the b·h·q·kv score matrix written and read back once (seed 001: intensity
      ≈ head_dim) unless one head's scores fit on chip, when they never leave it;
    - flash (Dao et al. 2022; FlashAttention-2, Dao 2023): Q and O once; K and V once per query block of
      Br = min(⌈M/4d⌉, d) rows (M = on-chip memory per unit, in elements), unless one kv head's K and V fit in
      the cache, when the re-reads hit it (intensity ≈ q/2 for prefill).

    Math time: naive, the FLOPs at the matrix peak; flash, the tile schedule of `_flash_tiles` (Br × Br blocks
    over the device's slots, softmax work not overlapped with the products, split keys for small grids).
    """
    b, h, kvh, d = _num.num(batch), _num.num(heads), _num.num(kv_heads), _num.num(head_dim)
    q, kv, s = _num.num(q_len), _num.num(kv_len), dtype_bytes(dtype)
    peak, unit = hw.matrix_peak(dtype)
    full_pairs = q * kv
    q_bytes = s * b * h * q * d
    k_bytes = v_bytes = s * b * kvh * kv * d

    def product(pairs: Num, external: Num, chained: Num, out: Num, softmax: bool) -> Kernel:
        flops = 2.0 * b * h * pairs * d
        vector = 5.0 * b * h * pairs if softmax else 0.0
        return Kernel(
            flops=flops + vector,
            matrix_s=flops / (peak * hw.eff_matmul),
            vector_flops=vector,
            sfu_ops=b * h * pairs if softmax else 0.0,
            external_in_bytes=external,
            chained_in_bytes=chained,
            out_bytes=out,
            peak=peak,
            unit=unit,
            assumptions={"attention": implementation, "causal": causal},
        )

    if implementation == "naive":
        scores = s * b * h * full_pairs
        fits = s * full_pairs <= hw.on_chip_bytes
        spilled = _num.where(fits, 0.0, scores)
        # Kernel 1: S = softmax(Q·Kᵀ) written out; kernel 2: O = S·V reads it back.
        first = product(full_pairs, k_bytes, q_bytes, spilled, softmax=True)
        second = product(full_pairs, v_bytes, spilled, s * b * h * q * d, softmax=False)
        first.extra = {"score_bytes": scores, "scores_fit_on_chip": _num.where(fits, 1.0, 0.0)}
        return [first, second]
    pairs = causal_pairs(q, kv) if causal else full_pairs
    m_elems = hw.local_bytes_per_unit / s if hw.local_bytes_per_unit else 1.0e5
    br = _num.minimum(_num.ceil(m_elems / (4.0 * d)), d)
    kv_fits = (k_bytes + v_bytes) / (b * kvh) * _num.minimum(float(hw.units), b * kvh) <= hw.cache_bytes
    rereads = _num.where(kv_fits, 1.0, _num.maximum(1.0, _num.ceil(q / br) * pairs / full_pairs))
    # Decode that runs masked MHA (groups over `DECODE_MAX_PACKED_GROUP`): one thread block per query head, each
    # reading its group's K and V. The first read comes from device memory; the other group − 1 come from L2 (when
    # the device's L2 bandwidth is known) while the group's blocks stream it together (below), from device memory
    # otherwise. Measured (aiconfigurator, TensorRT-LLM on A100), with the first K/V step below: decode median
    # 20.5 -> 20.3 %, p90 59.6 -> 58.1 %; the masked-MHA rows (groups 48-128) now sit 17-19 % fast at the profile's
    # L2 peak, where they read shared K/V at ~3.8 TB/s.
    group = h / kvh
    per_head = (q == 1.0) & (group > DECODE_MAX_PACKED_GROUP)
    shared = _num.where(per_head, (group - 1.0) * (k_bytes + v_bytes), 0.0)
    if hw.cache_bandwidth_bytes_per_s is not None and hw.threads_per_unit is not None:
        # The masked-MHA grid is (heads, batch, KV chunks) with the head fastest (TensorRT-LLM's
        # decoderMaskedMultiheadAttentionTemplate.h: hi = blockIdx.x, hi_kv = hi / (heads / kv_heads)), so the blocks
        # of one group are dispatched together and walk their K/V from the first key at the same pace: while they are
        # resident at once, the lines one of them brings in are read by the others within a few K/V steps, and the
        # L2 holds that window, not the whole cache. Otherwise the group's K/V must fit in L2 across its waves.
        resident_blocks = hw.units * hw.threads_per_unit / MMHA_BLOCK_THREADS
        resident_groups = _num.minimum(b * kvh, _num.ceil(resident_blocks / group))
        whole_fits = resident_groups * (k_bytes + v_bytes) / (b * kvh) <= hw.cache_bytes
        in_cache: _num.Bool = (group <= resident_blocks) | whole_fits
    else:
        in_cache = False
    kernel = product(
        pairs, (k_bytes + v_bytes) * rereads + _num.where(in_cache, 0.0, shared), q_bytes, s * b * h * q * d, True
    )
    kernel.cache_in_bytes = _num.where(in_cache, shared, 0.0)
    kernel.flops = kernel.flops + 2.0 * b * h * pairs * d  # the second product, in the same kernel
    # A block's first K/V step waits for its load: from device memory for one block of a group, from L2 for the
    # others when their shared K/V is served there (seconds per byte, averaged over the group's blocks).
    hbm_s_per_byte = 1.0 / (hw.memory_bytes_per_s * hw.eff_memory)
    l2_s_per_byte = 1.0 / (hw.cache_bandwidth_bytes_per_s * hw.eff_memory) if hw.cache_bandwidth_bytes_per_s else 0.0
    shared_share = _num.where(per_head & in_cache, (group - 1.0) / group, 0.0)
    first_kv_s_per_byte = (1.0 - shared_share) * hbm_s_per_byte + shared_share * l2_s_per_byte
    tiles = _flash_tiles(
        hw, (b, h, _num.where(per_head, h, kvh), d, q, kv), br, causal, peak, s, dtype, first_kv_s_per_byte
    )
    kernel.matrix_s = tiles.pop("seconds")
    # Split keys: the partial outputs are combined by a second kernel (FlashDecoding), or inside the same one (XQA).
    launches = tiles.pop("launches")
    kernel.exposed_s = tiles.pop("exposed_s") - (launches - 1.0) * hw.launch_s
    kernel.launches = launches
    kernel.extra = {"query_block_rows": br + _num.zeros_like(q), "kv_reads": rereads, **tiles}
    return [kernel]


# TensorRT-LLM's XQA decode kernel packs the query heads of one K/V head into one thread block for groups of at
# most 32 query heads; larger groups fall back to its masked-MHA kernel, one thread block per query head (the
# measured table's cliff: 32 query heads per K/V head run at GQA cost, 48 and more at many times it). Its blocks
# have 256 threads for long caches (FasterTransformer's and TensorRT-LLM's mmha launcher: 64, 128 or 256 threads
# as the cache grows), so units × threads per unit / 256 of them are resident. RL-ASSUME: occupancy is limited by
# threads alone.
DECODE_MAX_PACKED_GROUP = 32
MMHA_BLOCK_THREADS = 256

# MMA instructions work on 16-row fragments (mma.m16n8k16 on Ampere and Hopper tensor cores): a tile never has fewer.
MMA_ROWS = 16

# TensorRT-LLM's XQA kernel, which runs decode for groups of 2 to `DECODE_MAX_PACKED_GROUP` query heads per K/V head
# (TensorRT-LLM XQA mha.cu, FlashInfer 0.7.2 port, csrc/xqa/mha.cu; the sm80 kernel). Group 1 and masked MHA run
# TensorRT-LLM's masked-MHA kernel, whose source is not on file: they keep `PAGED_KV_ROUND_TRIPS`.
# - A thread block is 8 warps (ctaShapeInWarps {4, 1, 2}, l. 76) walking 256 keys per step (ctaTile.x = 4 × 64,
#   l. 89-100). Its shared memory (struct SharedMem, l. 330-356: K 4 warps × 2 buffers × 64 keys × 128 B = 64 KiB,
#   V 2 × 2 × 2 × 64 × 128 B = 64 KiB, Q, X and row maxima ~14-26 KiB for 16-32 rows) is over half of the 164 KiB an
#   A100 SM has, and it is launched with __launch_bounds__(256, 1) on sm80 (l. 2886, 2894): one block per SM, as
#   the profile's one tile per unit says; a decode grid runs in waves of `units` blocks.
# - Before its first product a block waits for three device-memory loads in series: the sequence's length
#   (getCacheSeqLen, l. 1772), the page index, read only below nbPages = ⌈length / tokensPerPage⌉ (l. 1794, 1851;
#   mhaUtils.cuh getPage, l. 298), and the K tile at that page (loadKTilePart, l. 1945). V takes the same chain in
#   the other warps. RL-ASSUME: each waits the profile's loaded memory latency.
XQA_KV_ROUND_TRIPS = 3.0
# - Keys are split over n = min(max(1, ⌊SMs / (batch · kv heads)⌋), ⌈max length / 256⌉) blocks per sequence
#   (launchMHA, l. 3016-3029), a rule rather than a cost search. The blocks of a sequence combine inside the kernel,
#   with no second launch: each stores its row maxima, sums and output tile to scratch and increments the sequence's
#   semaphore (atom.acq_rel.gpu, l. 2760); the last one then reads the n row maxima 8 loads at a time
#   (mergeRowMax<8>, l. 1485-1515, 2776), then the n tiles, each of its V warp groups (4 / min(head_dim / 64, 4),
#   gemm1NbWarpGrps, l. 95-98) taking every other tile through a double buffer (nbTileBuffers = 2, l. 2737,
#   2809-2818): 1 + ⌈n / 8⌉ + ⌈⌈n / groups⌉ / 2⌉ round trips in series. RL-ASSUME: the maximum length the
#   framework passes is the op's cache length (the op knows no other); TensorRT-LLM's own host code, which may pick
#   n otherwise, is not on file.
XQA_WARPS = 4.0  # ctaShapeInWarps.x: the warps of each half
XQA_WARP_KEYS = 64.0  # warpTile.x
XQA_CTA_KEYS = XQA_WARPS * XQA_WARP_KEYS  # ctaTile.x
XQA_ROW_MAX_LOADS = 8.0  # mergeRowMax<8>
XQA_TILE_BUFFERS = 2.0  # nbTileBuffers
# Measured (aiconfigurator, TensorRT-LLM 1.0 on A100): decode median 20.3 -> 19.5 %, p90 58.1 -> 53.2 % (the third
# round trip alone: 19.8 %, 53.2 %). What the source does not explain: a wave of XQA blocks over 2-8 cached keys
# takes ~6.3 µs there (7 µs at 16 query heads, ~10 µs at 24-32, whose tiles have 32 rows), the model ~2.6 µs.

# A decode kernel reads a paged KV cache (vLLM's PagedAttention, Kwon et al. 2023; TensorRT-LLM's XQA and masked-MHA
# kernels read `kv_cache_block_offsets`): a thread block learns where its first K/V page lives from the block table
# and only then can request it, two device-memory round trips in series (as an embedding waits for its token id)
# before its first product. With one decode thread block per compute unit, no other block hides them, so every wave
# of decode tiles (one query per sequence, packed) waits at least this many latencies. RL-ASSUME: the table entry
# is not in L2 already; a prefill reads K and V where the QKV projection wrote them. Measured (aiconfigurator,
# TensorRT-LLM on A100): decode median error 23.2 -> 20.7 %. XQA's own source shows a third load ahead of these, the
# sequence length (`XQA_KV_ROUND_TRIPS`); this count stays for the kernels whose source is not on file.
PAGED_KV_ROUND_TRIPS = 2.0


def _flash_tiles(
    hw: Hardware,
    shape: tuple[Num, Num, Num, Num, Num, Num],
    block: Num,
    causal: bool,
    peak: float,
    s: float,
    dtype: str,
    first_kv_s_per_byte: Num | None = None,
) -> dict[str, Num]:
    """The tile schedule of a flash-attention kernel (shape = batch, heads, kv_heads, head_dim, q_len, kv_len):
    its time on the compute units and their exposed waits, in seconds.

    A thread block owns `tile_rows` query rows of one head (or, for short queries, the rows of all h/kv_h heads
    that share a K/V head, as FlashDecoding and TensorRT-LLM's XQA pack them; never fewer than `MMA_ROWS`) and walks
    the K/V blocks of `block` keys, skipping those above a causal diagonal (Dao et al. 2022; FlashAttention-2, Dao
    2023). Per block it runs the two products on the matrix unit and the online softmax (~5 FP32 operations and
    one exp per score) on the vector and special-function units; on Ampere these do not overlap within a warp
    (FlashAttention-2 §3.1 on non-matmul FLOPs; FlashAttention-3 §3.1 overlaps them only with Hopper's
    asynchronous warpgroups), so a block costs the sum of the three. Blocks are scheduled over the device's slots
    like matmul tiles: the time is the larger of the average load per slot and the longest thread block. A grid
    with fewer thread blocks than slots may split the keys (FlashDecoding; `SPLIT_K`) and combine the partial
    outputs in a second kernel; XQA (decode of 2 to `DECODE_MAX_PACKED_GROUP` query heads per K/V head) splits by
    its own rule and combines in the same kernel (`XQA_ROW_MAX_LOADS`). Each wave waits for its query tile and first
    K/V block and stores its output tile, at the active thread blocks' share of bandwidth (`K_STEP`), and a decode
    tile (one query per sequence) waits at least `PAGED_KV_ROUND_TRIPS` memory latencies (XQA: `XQA_KV_ROUND_TRIPS`)
    for its first K/V page. `launches`: the kernels it takes (2 with a second, combining kernel).
    """
    b, h, kvh, d, q, kv = shape
    slots = hw.units * hw.concurrent_tiles_per_unit
    bw = hw.memory_bytes_per_s * hw.eff_memory
    group = h / kvh
    rows = q * group
    packed = rows <= block  # all query rows of a K/V head fit one tile
    heads_per_grid = _num.where(packed, b * kvh, b * h)
    tile_rows = _num.minimum(block, _num.ceil(_num.where(packed, rows, q) / MMA_ROWS) * MMA_ROWS)
    positions = _num.where(packed, q, tile_rows)  # query positions one tile covers
    n_q = _num.ceil(q / positions)
    n_kv = _num.ceil(kv / block)
    if causal:
        first = kv - q  # keys every query sees
        blocks = n_q * first / block + positions * n_q * (n_q + 1.0) / (2.0 * block) + n_q / 2.0
        blocks = _num.minimum(_num.maximum(blocks, n_q), n_q * n_kv)  # np.clip's order: the lower bound, then the upper
    else:
        blocks = n_q * n_kv
    vector_peak = hw.vector_peak(dtype)
    sfu = hw.special_function_ops_per_s or vector_peak / 4.0
    scores = tile_rows * block
    per_block = slots * (
        4.0 * scores * d / (peak * hw.eff_matmul) + 5.0 * scores / (vector_peak * hw.eff_vector)
        + scores / (sfu * hw.eff_vector)
    )  # fmt: skip
    decode = packed & (q == 1.0)  # one new token per sequence against its cache
    xqa = decode & (group > 1.0)  # masked MHA comes here with kv_heads = heads
    latency = hw.memory_latency_s or 0.0
    page_wait = _num.where(xqa, XQA_KV_ROUND_TRIPS, PAGED_KV_ROUND_TRIPS) * latency
    first_kv = 2.0 * _num.minimum(block, kv) * d * s
    kv_s_per_byte = 1.0 / bw if first_kv_s_per_byte is None else first_kv_s_per_byte

    point = _num.is_point(per_block, blocks, heads_per_grid)
    xp = _num.FLOATS if point else _num.ARRAYS  # the split search runs these many times

    def schedule(split: Num, combine_s: Num) -> tuple[Num, Num, Num]:
        """Seconds on the units, exposed waits and thread blocks with the keys split `split` ways."""
        ctas = heads_per_grid * n_q * split
        per_cta = xp.ceil(n_kv / split)
        seconds = xp.maximum(heads_per_grid * blocks / slots, per_cta) * per_block
        waves = xp.ceil(ctas / slots)
        partial = split > 1.0
        out_bytes = tile_rows * d * xp.where(partial, PARTIAL_BYTES, s)
        exposed = waves * ((tile_rows * d * s + out_bytes) / bw + first_kv * kv_s_per_byte) * xp.minimum(ctas, slots)
        exposed = xp.where(decode, xp.maximum(exposed, waves * page_wait), exposed)
        seconds = seconds + xp.where(partial, 2.0 * PARTIAL_BYTES * split * b * h * q * d / bw, 0.0)
        return seconds, exposed + xp.where(partial, combine_s, 0.0), ctas

    best: Num = (
        math.inf if point else np.full(np.broadcast_shapes(*map(np.shape, (per_block, blocks, heads_per_grid))), np.inf)
    )
    out: dict[str, Num] = {
        name: _num.zeros_like(best) for name in ("seconds", "exposed_s", "kv_splits", "ctas", "launches")
    }
    if not (point and xqa):
        for split in SPLIT_K:
            seconds, exposed, ctas = schedule(float(split), hw.launch_s)
            if split > 1:
                exposed = xp.where(heads_per_grid * n_q < slots, exposed, math.inf)
            total = seconds + exposed
            better = total < best
            best = xp.where(better, total, best)
            launches = 2.0 if split > 1 else 1.0
            for name, value in (
                ("seconds", seconds), ("exposed_s", exposed), ("kv_splits", float(split)), ("ctas", ctas),
                ("launches", launches),
            ):  # fmt: skip
                out[name] = xp.where(better, value, out[name])
    if not point or xqa:
        fill = -_num.ceil(-(hw.units / heads_per_grid))  # ⌊SMs / (batch · kv heads)⌋
        split_x = _num.minimum(_num.maximum(1.0, fill), _num.ceil(kv / XQA_CTA_KEYS))
        # The last block's merge (`XQA_ROW_MAX_LOADS`): the semaphore, the row maxima, then each V warp group's tiles.
        warp_groups = XQA_WARPS / _num.minimum(_num.maximum(d / XQA_WARP_KEYS, 1.0), XQA_WARPS)
        tiles_each = _num.ceil(split_x / warp_groups)
        combine = 1.0 + _num.ceil(split_x / XQA_ROW_MAX_LOADS) + _num.ceil(tiles_each / XQA_TILE_BUFFERS)
        seconds, exposed, ctas = schedule(split_x, combine * latency)
        for name, value in (
            ("seconds", seconds), ("exposed_s", exposed), ("kv_splits", split_x), ("ctas", ctas), ("launches", 1.0),
        ):  # fmt: skip
            out[name] = _num.where(xqa, value, out[name])
    return out
