"""Memory-bound (streaming) ops: elementwise, activations, reductions, softmax, norms, rotary, embedding and
cross-entropy. Each is one kernel that streams its tensors through device memory (`elementwise_kernel`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from roofline._estimate import Array, Num
from roofline._hardware import Hardware, dtype_bytes
from roofline._kernels import Kernel, arr
from roofline.ops._alu import alu_cost

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

# How a memory-bound kernel loads device memory: bytes per load per thread. A streaming kernel keeps about one load
# per input stream per thread in flight, so it reaches the bandwidth Little's law allows (`Hardware.parallel_bandwidth`,
# combined with the device bandwidth as `roofline._kernels.MEMORY_QUEUEING_NORM` says).
# "vectorized": 128-bit loads (CUDA C++ Best Practices Guide, coalesced and vectorized access; PyTorch's and
# Triton's elementwise kernels), which come within a few per cent of HBM bandwidth; "scalar": one element per
# load, as simple hand-written kernels do (vLLM/Sarathi's rms_norm, silu_and_mul and rotary kernels index one
# element per thread per loop trip; PyTorch's index_select behind an embedding lookup).
MEMORY_ACCESS: dict[str, float | None] = {"vectorized": 16.0, "scalar": None}  # None: the element size


def elementwise_kernel(
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
    XLA's measured ALU cost per element on this device's architecture (`roofline.ops.alu_cost`) to `flops_per_element`.
    """
    e, s = arr(elements), dtype_bytes(dtype)
    ins = arr(inputs)
    chained = np.minimum(arr(chained_inputs), ins)
    costs = [alu_cost(fn, dtype, hw.architecture) for fn in functions]
    fpe = arr(flops_per_element) + sum(cost for cost, _ in costs)
    kernel = elementwise_kernel(
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
    return [elementwise_kernel(hw, e, fpe, tpe, s * e * (inputs - 1), s * e, s * e, s, access, streams=inputs)]


def reduction(hw: Hardware, rows: Array, cols: Array, dtype: str = "bf16", access: str = "vectorized") -> list[Kernel]:
    """Sum (or max) over the last axis: reads rows·cols, writes rows."""
    r, c, s = arr(rows), arr(cols), dtype_bytes(dtype)
    return [elementwise_kernel(hw, r * c, 1.0, 0.0, 0.0, s * r * c, s * r, s, access)]


def softmax(
    hw: Hardware, rows: Array, cols: Array, dtype: str = "bf16", online: bool = True, access: str = "vectorized"
) -> list[Kernel]:
    """Softmax over the last axis. Online (Milakov & Gimelshein 2018): one read pass computing the running max and
    sum, one normalising pass over the row held on chip; multi-pass: max, then exp-sum, then normalise, each
    reading the input from device memory (3 reads, 1 write)."""
    r, c, s = arr(rows), arr(cols), dtype_bytes(dtype)
    reads = 1.0 if online else 3.0
    tpe = 1.0 if online else 2.0  # the multi-pass form computes exp in the sum pass and again when normalising
    return [elementwise_kernel(hw, r * c, 5.0, tpe, s * r * c * (reads - 1), s * r * c, s * r * c, s, access)]


# PyTorch's vectorized layer norm (aten/src/ATen/native/cuda/layer_norm_kernel.cu, `vectorized_layer_norm_kernel`,
# the path for contiguous, aligned rows whose length is a multiple of `vec_size`): one thread block of
# `num_threads()` = 128 threads (ATen/native/cuda/thread_constants.h) per row; each thread loads `vec_size` = 4
# elements at a time ("we could make it dependent on dtype, but that would lead to different results"), first
# accumulating Welford statistics over the row, then, after the block reduction, reading the row again (with the
# scale and shift) to write y. RL-ASSUME: the trips of each pass wait for their load one after another (the Welford
# update carries the running mean and count through a reciprocal from one element to the next), so a short row costs
# its trips' round trips at the loaded latency, not its bytes over the bandwidth (docs/model/memory-bound.md).
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
        kernel = elementwise_kernel(hw, r * c, fpe, 0.0, params, s * r * c, s * r * c, s, access)
        kernel.sfu_ops = r  # one rsqrt per row
        return [kernel]
    resident_rows = np.minimum(r, hw.units * (hw.threads_per_unit or 0) / LAYERNORM_BLOCK_THREADS)
    spills = resident_rows * c * s > hw.cache_bytes
    reread = np.where(spills, s * r * c, 0.0)
    kernel = elementwise_kernel(hw, r * c, fpe, 0.0, params + reread, s * r * c, s * r * c, s, access)
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
    return [elementwise_kernel(hw, elements, 3.0, 0.0, tables, s * elements, s * elements, s, access, streams=2.0)]


def embedding(
    hw: Hardware, tokens: Array, hidden: Array, vocab: Array, dtype: str = "bf16", access: str = "vectorized"
) -> list[Kernel]:
    """Gather `tokens` rows of a vocab × hidden table: reads the rows it needs (never the whole table) and the
    int32 token ids, writes tokens × hidden. No math. Each row load waits for its token id: two loads in series."""
    t, h, s = arr(tokens), arr(hidden), dtype_bytes(dtype)
    _ = vocab  # the table size does not move bytes; rows are gathered
    return [elementwise_kernel(hw, t * h, 0.0, 0.0, 4.0 * t, s * t * h, s * t * h, s, access, dependent_loads=2.0)]


def cross_entropy(
    hw: Hardware, tokens: Array, vocab: Array, dtype: str = "bf16", access: str = "vectorized"
) -> list[Kernel]:
    """Loss from logits [tokens, vocab] with an online log-sum-exp: one read of the logits, fp32 loss per token."""
    t, v, s = arr(tokens), arr(vocab), dtype_bytes(dtype)
    return [elementwise_kernel(hw, t * v, 4.0, 1.0, 4.0 * t, s * t * v, 4.0 * t, s, access)]
