"""Per-op FLOPs, bytes and math time, vectorised over numpy arrays of shapes.

Every function takes sizes as arrays (or scalars) that broadcast together and returns the kernels the op runs.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from roofline._estimate import Array
from roofline._hardware import Hardware, dtype_bytes
from roofline._kernels import Kernel, arr

# Matmul tiles are the output tiles a library picks among; waves are rounds of tiles over the compute units
# (NVIDIA, "Matrix Multiplication Background", dimension quantization; seed 002's 1792 → 1793 example).

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


def _aligned(dim: Array, elem_bytes: float, alignment_bytes: int) -> NDArray[np.bool_]:
    out: NDArray[np.bool_] = np.mod(dim * elem_bytes, alignment_bytes) == 0
    return out


def matmul(
    hw: Hardware,
    m: Array,
    n: Array,
    k: Array,
    batch: Array | float = 1.0,
    dtype: str = "bf16",
    out_dtype: str | None = None,
    tile: tuple[int, int] | None = None,
    epilogue: tuple[str, ...] = (),
    fuse_epilogue: bool = True,
) -> list[Kernel]:
    """C[b, m, n] = A[b, m, k] · B[b, k, n], with an optional elementwise epilogue on C.

    FLOPs = 2·b·m·n·k; ideal bytes = size(in)·b·(m·k + k·n) + size(out)·b·m·n. Math time is quantized: with output
    tiles tm × tn, tiles = b·⌈m/tm⌉·⌈n/tn⌉ run in waves of units × concurrent tiles, each wave taking one tile's
    time; the tile is the candidate with the least time, as a library heuristic picks (or `tile` if given).
    """
    m, n, k, b = arr(m), arr(n), arr(k), arr(batch)
    s_in, s_out = dtype_bytes(dtype), dtype_bytes(out_dtype or dtype)
    peak, unit = hw.matrix_peak(dtype)
    aligned = _aligned(k, s_in, hw.alignment_bytes) & _aligned(n, s_in, hw.alignment_bytes)
    eff = hw.eff_matmul * np.where(aligned, 1.0, MISALIGNED_EFFICIENCY)
    slots = hw.units * hw.concurrent_tiles_per_unit
    candidates = [tile] if tile is not None else list(hw.tiles)

    shape = np.broadcast_shapes(m.shape, n.shape, k.shape, b.shape)
    best_s = np.full(shape, np.inf)
    best = {name: np.zeros(shape) for name in ("tiles", "waves", "tile_m", "tile_n")}
    for tm, tn in candidates:
        tiles = b * np.ceil(m / tm) * np.ceil(n / tn)
        waves = np.ceil(tiles / slots)
        # One wave: every slot computes a tm × tn tile over the whole k (2·tm·tn·k FLOPs) at peak / slots.
        seconds = waves * slots * 2.0 * tm * tn * k / (peak * eff)
        better = seconds < best_s
        best_s = np.where(better, seconds, best_s)
        for name, value in (("tiles", tiles), ("waves", waves), ("tile_m", tm), ("tile_n", tn)):
            best[name] = np.where(better, value, best[name])
    flops = 2.0 * b * m * n * k
    wave_eff = best["tiles"] / (best["waves"] * slots)

    out_elems = b * m * n
    a_bytes, b_bytes = s_in * b * m * k, s_in * b * k * n
    main = Kernel(
        flops=flops,
        matrix_s=best_s,
        vector_flops=np.zeros(()),
        sfu_ops=np.zeros(()),
        external_in_bytes=a_bytes + b_bytes,
        chained_in_bytes=np.zeros(()),
        out_bytes=s_out * out_elems,
        peak=np.asarray(peak),
        unit=unit,
        consumes_whole_input=True,
        extra={**best, "wave_efficiency": wave_eff, "aligned": aligned.astype(np.float64)},
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
            kernels.append(_elementwise_kernel(hw, out_elems, fpe, tpe, extra_in, s_out * out_elems, s_out * out_elems))
    return kernels


def _elementwise_kernel(
    hw: Hardware,
    elements: Array,
    fpe: float | Array,
    tpe: float | Array,
    external: Array | float,
    chained: Array | float,
    out: Array | float,
) -> Kernel:
    flops = arr(fpe) * elements
    return Kernel(
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
) -> list[Kernel]:
    """y = f(x₁ … xᵢ) over `elements`: reads inputs, writes outputs, once each.

    Inside a chain, `chained_inputs` of the inputs are the outputs of earlier ops (or re-reads of the chain's input)
    and stay on chip when the chain is fused.
    """
    e, s = arr(elements), dtype_bytes(dtype)
    ins = arr(inputs)
    chained = np.minimum(arr(chained_inputs), ins)
    return [
        _elementwise_kernel(
            hw, e, flops_per_element, transcendentals_per_element, s * e * (ins - chained), s * e * chained,
            s * e * arr(outputs),
        )
    ]  # fmt: skip


def activation(hw: Hardware, elements: Array, function: str, dtype: str = "bf16") -> list[Kernel]:
    """relu, gelu, silu, sigmoid, tanh, or a gated pair (swiglu, geglu: two inputs, one output)."""
    inputs, fpe, tpe = ACTIVATIONS[function]
    return elementwise(hw, elements, inputs, 1, fpe, tpe, dtype)


def reduction(hw: Hardware, rows: Array, cols: Array, dtype: str = "bf16") -> list[Kernel]:
    """Sum (or max) over the last axis: reads rows·cols, writes rows."""
    r, c, s = arr(rows), arr(cols), dtype_bytes(dtype)
    return [_elementwise_kernel(hw, r * c, 1.0, 0.0, 0.0, s * r * c, s * r)]


def softmax(hw: Hardware, rows: Array, cols: Array, dtype: str = "bf16", online: bool = True) -> list[Kernel]:
    """Softmax over the last axis. Online (Milakov & Gimelshein 2018): one read pass computing the running max and
    sum, one normalising pass over the row held on chip; multi-pass: max, then exp-sum, then normalise, each
    reading the input from device memory (3 reads, 1 write)."""
    r, c, s = arr(rows), arr(cols), dtype_bytes(dtype)
    reads = 1.0 if online else 3.0
    tpe = 1.0 if online else 2.0  # the multi-pass form computes exp in the sum pass and again when normalising
    return [_elementwise_kernel(hw, r * c, 5.0, tpe, s * r * c * (reads - 1), s * r * c, s * r * c)]


def layernorm(hw: Hardware, rows: Array, cols: Array, dtype: str = "bf16", rms: bool = False) -> list[Kernel]:
    """Layer norm (Ba et al. 2016) or RMS norm (Zhang & Sennrich 2019), fused: read x once, write y once, plus
    the scale (and shift) vectors; statistics in fp32 on chip."""
    r, c, s = arr(rows), arr(cols), dtype_bytes(dtype)
    params = (1.0 if rms else 2.0) * s * c
    fpe = 4.0 if rms else 8.0
    kernel = _elementwise_kernel(hw, r * c, fpe, 0.0, params, s * r * c, s * r * c)
    kernel.sfu_ops = r  # one rsqrt per row
    return [kernel]


def rotary(hw: Hardware, tokens: Array, heads: Array, head_dim: Array, dtype: str = "bf16") -> list[Kernel]:
    """Rotary position embedding (Su et al. 2021) on one tensor of tokens × heads × head_dim: each pair of
    elements is rotated (4 multiplies, 2 adds per pair = 3 FLOPs per element); cos/sin tables are read once."""
    t, h, d, s = arr(tokens), arr(heads), arr(head_dim), dtype_bytes(dtype)
    elements = t * h * d
    tables = 2.0 * s * t * d / 2.0
    return [_elementwise_kernel(hw, elements, 3.0, 0.0, tables, s * elements, s * elements)]


def embedding(hw: Hardware, tokens: Array, hidden: Array, vocab: Array, dtype: str = "bf16") -> list[Kernel]:
    """Gather `tokens` rows of a vocab × hidden table: reads the rows it needs (never the whole table) and the
    int32 token ids, writes tokens × hidden. No math."""
    t, h, s = arr(tokens), arr(hidden), dtype_bytes(dtype)
    _ = vocab  # the table size does not move bytes; rows are gathered
    return [_elementwise_kernel(hw, t * h, 0.0, 0.0, 4.0 * t, s * t * h, s * t * h)]


def cross_entropy(hw: Hardware, tokens: Array, vocab: Array, dtype: str = "bf16") -> list[Kernel]:
    """Loss from logits [tokens, vocab] with an online log-sum-exp: one read of the logits, fp32 loss per token."""
    t, v, s = arr(tokens), arr(vocab), dtype_bytes(dtype)
    return [_elementwise_kernel(hw, t * v, 4.0, 1.0, 4.0 * t, s * t * v, 4.0 * t)]


def causal_pairs(q_len: Array, kv_len: Array) -> Array:
    """Query-key pairs a causal mask keeps when the q_len queries are the last of kv_len positions:
    q·(kv − q) + q·(q + 1)/2."""
    q, kv = arr(q_len), arr(kv_len)
    out: Array = q * (kv - q) + q * (q + 1.0) / 2.0
    return out


def attention(
    hw: Hardware,
    batch: Array,
    heads: Array,
    kv_heads: Array,
    head_dim: Array,
    q_len: Array,
    kv_len: Array,
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
    """
    b, h, kvh, d = arr(batch), arr(heads), arr(kv_heads), arr(head_dim)
    q, kv, s = arr(q_len), arr(kv_len), dtype_bytes(dtype)
    peak, unit = hw.matrix_peak(dtype)
    full_pairs = q * kv
    q_bytes = s * b * h * q * d
    k_bytes = v_bytes = s * b * kvh * kv * d

    def product(pairs: Array, external: Array, chained: Array, out: Array, softmax: bool) -> Kernel:
        flops = 2.0 * b * h * pairs * d
        vector = 5.0 * b * h * pairs if softmax else np.zeros(())
        return Kernel(
            flops=flops + vector,
            matrix_s=flops / (peak * hw.eff_matmul),
            vector_flops=vector,
            sfu_ops=b * h * pairs if softmax else np.zeros(()),
            external_in_bytes=external,
            chained_in_bytes=chained,
            out_bytes=out,
            peak=np.asarray(peak),
            unit=unit,
            assumptions={"attention": implementation, "causal": causal},
        )

    if implementation == "naive":
        scores = s * b * h * full_pairs
        fits = s * full_pairs <= hw.on_chip_bytes
        spilled = np.where(fits, 0.0, scores)
        # Kernel 1: S = softmax(Q·Kᵀ) written out; kernel 2: O = S·V reads it back.
        first = product(full_pairs, k_bytes, q_bytes, spilled, softmax=True)
        second = product(full_pairs, v_bytes, spilled, s * b * h * q * d, softmax=False)
        first.extra = {"score_bytes": scores, "scores_fit_on_chip": fits.astype(np.float64)}
        return [first, second]
    pairs = causal_pairs(q, kv) if causal else full_pairs
    m_elems = hw.local_bytes_per_unit / s if hw.local_bytes_per_unit else 1.0e5
    br = np.minimum(np.ceil(m_elems / (4.0 * d)), d)
    kv_fits = (k_bytes + v_bytes) / (b * kvh) * np.minimum(hw.units, b * kvh) <= hw.cache_bytes
    rereads = np.where(kv_fits, 1.0, np.maximum(1.0, np.ceil(q / br) * pairs / full_pairs))
    kernel = product(pairs, (k_bytes + v_bytes) * rereads, q_bytes, s * b * h * q * d, softmax=True)
    kernel.flops = kernel.flops + 2.0 * b * h * pairs * d  # the second product, in the same kernel
    kernel.matrix_s = 2.0 * kernel.matrix_s
    kernel.extra = {"query_block_rows": br * np.ones_like(q), "kv_reads": rereads}
    return [kernel]
