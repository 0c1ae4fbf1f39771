"""A mixture-of-experts FFN on one device, as TensorRT-LLM's fused-MoE flow runs it (`CutlassMoeFCRunner::runMoe` in
`cpp/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/`; its routing, permute and finalize kernels in
`cpp/tensorrt_llm/kernels/moe_kernels.cu`, read in FlashInfer 0.7.2's vendored copy; decision 0029):

1. routing: the top-k of each token's router logits and their softmax weights (one kernel over tokens × experts);
2. expand: the tokens routed to this device's experts are copied into expert order (`expandInputRowsKernel`),
   quantised on the way when the products are narrow;
3. the first grouped GEMM (gate and up projections of every local expert: rows = its tokens);
4. the activation (SwiGLU: act(gate) · up, or squared ReLU without a gate), writing the second GEMM's input;
5. the second grouped GEMM (down projections);
6. finalize (`finalizeMoeRoutingKernel`): each token's k expert outputs, weighted and summed, back in token order.

Where the grouped GEMMs are CUTLASS TMA warp-specialised kernels (`TMA_WS_GROUPED_GEMM_ARCHITECTURES`), a set-up
kernel writes their per-expert layouts before the first (seven kernels).

A grouped GEMM schedules every expert's tiles over the device together: its tiles and waves are those of a batched
product of `touched` experts with `per_expert` rows each (`roofline.ops.matmul`'s batch), and it reads each touched
expert's weights once. It never splits k: the MoE GEMM runner's configurations are built with `max_split_k = 1`
(`getTmaWarpSpecializedConfigs`, `getAmpereConfigs` in moe_gemm_template_dispatch.h), so an under-filled grid walks
the whole k loop on the units it has.

`tensor` splits each expert's intermediate width over devices (the first GEMM's columns, the second's k); `expert`
splits the experts: the device holds experts / expert of them and computes the pairs routed there. `tokens` are the
tokens entering the layer (every token of the expert group, before routing).

Routing: `uniform` is independent top-k routing in expectation (a batch of T tokens touches E·(1 − (1 − k/E)^T)
experts; the inference core's assumption); `balanced` assigns every expert T·k/E tokens exactly (round-robin, as
benchmark harnesses do); `power_law` draws the experts' loads from a bounded power law of exponent `alpha`, and the
device is the most loaded of the expert-parallel ranks (`rank_load`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from roofline import _num
from roofline._estimate import Array, Num
from roofline._hardware import Hardware, dtype_bytes
from roofline._kernels import Kernel, arr
from roofline.ops._matmul import matmul
from roofline.ops._memory_bound import elementwise_kernel
from roofline.ops._quantize import Quantization, quantization

ROUTINGS = ("uniform", "balanced", "power_law")
# aiconfigurator's synthetic power-law routing (its collector, as its own model describes it): each expert's weight
# drawn from a bounded power law on [1, 0.8 · tokens]; the loads are the weights scaled to tokens · k, an expert
# seeing a token at most once; the most-loaded expert-parallel group is the one timed. Modelled with the law's
# stratified quantiles (one per expert): the most-loaded rank is the one holding the hottest expert, its other experts
# at the mean load of the rest; an expert of mean load λ receives a token with probability 1 − e^−λ (Poisson).
POWER_LAW_MAX_SHARE = 0.8

# Where TensorRT-LLM's fused MoE runs its grouped GEMMs as CUTLASS TMA warp-specialised kernels
# (`MoeGemmRunner::supportsTmaWarpSpecialized`, moe_gemm_template_dispatch.h; moe_tma_warp_specialized_traits.h in
# FlashInfer 0.7.2's copy): Hopper and datacenter Blackwell for every type; sm_120 (RTX Pro 6000, GeForce Blackwell)
# only for NVFP4 products and fp8 activations on fp4 weights; every other device runs the Ampere grouped GEMM. That
# path first launches `computeStridesTmaWarpSpecializedKernel` (cutlass_fused_moe_kernels.cuh,
# `setupTmaWarpSpecializedInputs`): one thread per local expert reads its first-token offset and writes both GEMMs'
# per-expert pointers, strides and problem shapes.
TMA_WS_GROUPED_GEMM_ARCHITECTURES = ("sm_90", "sm_100", "sm_103")
SM120_TMA_WS_QUANTIZATIONS = ("nvfp4", "w4a8_mxfp4_mxfp8")
TMA_WS_LAYOUT_BYTES = 2 * 8 * 8  # per expert and GEMM: 8 eight-byte entries (A, B, C, D pointers and strides)


def runs_tma_ws_grouped_gemm(hw: Hardware, quantization_scheme: str) -> bool:
    """Whether the device's fused MoE runs the TMA warp-specialised grouped GEMMs (and their set-up kernel)."""
    if hw.architecture in TMA_WS_GROUPED_GEMM_ARCHITECTURES:
        return True
    return hw.architecture in ("sm_120", "sm_121") and quantization_scheme in SM120_TMA_WS_QUANTIZATIONS


def _capped(load: Array, total: float, cap: float) -> Array:
    """`load` rescaled to sum to `total` with no element above `cap` (water-filling: the capped elements stay at
    the cap and the rest are rescaled until none exceeds it)."""
    out: Array = load * (total / load.sum())
    for _ in range(out.size):
        over = out > cap
        if not over.any():
            break
        free = ~over & (out < cap)
        out = np.where(over, cap, out).astype(np.float64)
        rest = total - out[~free].sum()
        if not free.any() or rest <= 0.0:
            break
        out[free] *= rest / out[free].sum()
    return out


@functools.lru_cache(maxsize=1 << 17)
def rank_load(experts: int, ranks: int, top_k: int, tokens: int, alpha: float) -> tuple[float, float]:
    """Under power-law routing: the pairs the most-loaded of `ranks` expert groups computes, relative to the balanced
    tokens · k / ranks, and the experts of that group expected to receive a token."""
    pairs = float(tokens * top_k)
    per_rank = experts // ranks
    high = max(POWER_LAW_MAX_SHARE * tokens, 2.0)
    u = (np.arange(experts) + 0.5) / experts
    if abs(alpha - 1.0) < 1e-9:
        weights = high**u
    else:  # inverse CDF of p(x) ∝ x^-alpha on [1, high]
        a = 1.0 - alpha
        weights = (1.0 + u * (high**a - 1.0)) ** (1.0 / a)
    load = _capped(weights, pairs, float(tokens))
    hottest = float(load.max())
    others = (pairs - hottest) / max(experts - 1, 1)
    heaviest = hottest + (per_rank - 1) * others
    touched = (1.0 - math.exp(-hottest)) + (per_rank - 1) * (1.0 - math.exp(-others))
    return heaviest / (pairs / ranks), max(touched, 1.0)


def _routed(experts: Num, top_k: Num, tokens: Num, expert: Num, routing: str, alpha: Num) -> tuple[Num, Num]:
    """This device's token-expert pairs and the local experts they touch."""
    local = experts / expert
    pairs = tokens * top_k / expert
    if routing == "uniform":
        touched = experts * (1.0 - (1.0 - top_k / experts) ** tokens) / expert
        return pairs, _num.maximum(touched, _num.minimum(pairs, 1.0))
    if routing == "balanced":
        return pairs, _num.minimum(local, _num.maximum(_num.ceil(pairs), 1.0))
    if routing != "power_law":
        raise ValueError(f"unknown routing {routing!r}; known: {', '.join(ROUTINGS)}")
    shape = np.broadcast_shapes(*(np.shape(x) for x in (experts, top_k, tokens, expert, alpha)))
    e, k, t, r, a = (np.broadcast_to(arr(x), shape).reshape(-1) for x in (experts, top_k, tokens, expert, alpha))
    out = [rank_load(int(n), int(ranks), int(top), int(count), float(exponent))
           for n, top, count, ranks, exponent in zip(e, k, t, r, a, strict=True)]  # fmt: skip
    factor = np.array([f for f, _ in out]).reshape(shape)
    used: Array = np.array([n for _, n in out]).reshape(shape)
    if not shape:
        return float(pairs * factor), float(used)
    return pairs * factor, used


def moe(
    hw: Hardware,
    tokens: Num,
    hidden: Num,
    inter: Num,
    top_k: Num,
    experts: Num,
    tensor: Num = 1.0,
    expert: Num = 1.0,
    gated: bool = True,
    dtype: str = "bf16",
    quantization_scheme: str = "none",
    routing: str = "uniform",
    alpha: Num = 1.2,
    weight_dtype: str | None = None,
    own_tokens: Num | None = None,
) -> list[Kernel]:
    """The kernels of one MoE layer on one device (module docstring). `quantization_scheme` (`QUANTIZATIONS`, or
    "none": the products at `dtype`) sets the products' type, the weights' bytes and the narrow efficiency; the
    input's quantisation is fused into the expand kernel and the second GEMM's into the activation kernel.
    `weight_dtype` (scheme "none" only): the experts' weights stored narrower than `dtype` and dequantised in the
    kernel (weight-only quantisation), read at its size.

    `own_tokens`: the tokens this device holds when the expert group exchanges tokens all to all (DeepEP-style
    dispatch and combine): it routes only those, and its finalize sums their k returned outputs. None: every device
    of the group routes all `tokens` and writes partial sums for all of them (an allgather / reduce-scatter MoE, and
    what aiconfigurator's harness times)."""
    t, h, i, k, e = (_num.num(x) for x in (tokens, hidden, inter, top_k, experts))
    own = t if own_tokens is None else _num.num(own_tokens)
    tp, ep = _num.num(tensor), _num.num(expert)
    s = dtype_bytes(dtype)
    q: Quantization | None = None if quantization_scheme == "none" else quantization(quantization_scheme)
    s_q = s if q is None or not q.quantizes_input else q.out_bytes + (q.scale_bytes / q.group if q.group else 0.0)
    g = 2.0 if gated else 1.0
    width = i / tp
    pairs, touched = _routed(e, k, t, ep, routing, alpha)
    per_expert = pairs / touched
    zero = _num.zeros_like(pairs)
    kernels = [
        # routing: read each token's logits (fp32), write its k expert ids and weights
        elementwise_kernel(hw, own * e, 2.0, 1.0, zero, 4.0 * own * e, 8.0 * own * k, 4.0),
        # expand: read the routed tokens' rows, write them in expert order (quantised when the products are narrow)
        elementwise_kernel(hw, pairs * h, 1.0, 0.0, zero, s * pairs * h, s_q * pairs * h, s),
    ]
    if runs_tma_ws_grouped_gemm(hw, quantization_scheme):
        # the grouped GEMMs' set-up: each local expert's offset in, its two GEMMs' layouts out (TMA_WS_LAYOUT_BYTES)
        local = e / ep
        layouts = 2.0 * TMA_WS_LAYOUT_BYTES * local
        kernels.append(
            elementwise_kernel(hw, local, 0.0, 0.0, zero, 8.0 * (local + 1.0), layouts, 8.0, access="scalar")
        )
    scheme = quantization_scheme if q else "none"
    # the first GEMM (gate and up: n = g · width over k = hidden), the second (down: n = hidden over k = width)
    products = [
        matmul(hw, per_expert, n, k_dim, touched, dtype, dtype, quantization=scheme, input_quantized=True,
               may_split_k=False)
        for n, k_dim in ((g * width, h), (h, width))
    ]  # fmt: skip
    if weight_dtype is not None and q is None:
        for gemm in products:  # the weights (B) at their own size
            b_bytes = gemm[0].extra["b_bytes"]
            gemm[0].external_in_bytes = gemm[0].external_in_bytes + b_bytes * (dtype_bytes(weight_dtype) / s - 1.0)
    kernels.extend(products[0])
    # activation: act(gate) · up over the first GEMM's output, written as the second GEMM's input
    kernels.append(elementwise_kernel(hw, pairs * width, 4.0, 1.0, zero, s * g * pairs * width,
                                      s_q * pairs * width, s, streams=g))  # fmt: skip
    kernels.extend(products[1])
    # finalize: each token's k outputs (those computed here), weighted and summed, in token order; all to all, the
    # device's own tokens' k outputs, returned by the combine
    if own_tokens is None:
        kernels.append(elementwise_kernel(hw, t * h, 2.0 * k / ep, 0.0, zero, s * pairs * h, s * t * h, s))
    else:
        kernels.append(elementwise_kernel(hw, own * h, 2.0 * k, 0.0, zero, s * own * k * h, s * own * h, s))
    return kernels
