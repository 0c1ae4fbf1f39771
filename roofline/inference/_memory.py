"""Parameters and memory: parameter counts of the whole model, and the weights, KV cache and prefill activations
on the busiest device of a parallel layout (kipply 2022; Megatron-LM's splits; Pope et al. 2022)."""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import NDArray

from roofline._hardware import dtype_bytes
from roofline._num import Array
from roofline.inference._config import Parallelism, Precision, Transformer
from roofline.inference._results import ParameterCount


def _mla_params(m: Transformer) -> tuple[float, float]:
    """(replicated, split over the tensor group) parameters of one MLA block: the down projections and their norms
    are replicated, the per-head up projections and the output projection split (as vLLM and SGLang shard them)."""
    assert m.mla is not None
    a, d, h = m.mla, m.hidden, m.heads
    qk = a.nope_dim + a.rope_dim
    q_down = d * a.q_lora_rank + a.q_lora_rank if a.q_lora_rank else 0  # with its RMS norm
    q_up = (a.q_lora_rank or d) * h * qk
    kv_down = d * a.latent + a.kv_lora_rank  # with its RMS norm
    kv_up = a.kv_lora_rank * h * (a.nope_dim + a.v_dim)
    out = h * a.v_dim * d
    return float(q_down + kv_down), float(q_up + kv_up + out)


def _attention_params(m: Transformer) -> float:
    if m.mla is not None:
        return sum(_mla_params(m))
    qkv = m.hidden * (m.heads + 2 * m.kv_heads) * m.head_dim
    out = m.heads * m.head_dim * m.hidden
    bias = (m.heads + 2 * m.kv_heads) * m.head_dim + m.hidden if m.bias else 0
    return float(qkv + out + bias)


def _ffn_params(m: Transformer, width: int) -> float:
    """One FFN of intermediate size `width`: 3·d·f gated (gate, up, down), 2·d·f otherwise."""
    matrices = (3 if m.gated else 2) * m.hidden * width
    bias = ((2 if m.gated else 1) * width + m.hidden) if m.bias else 0
    return float(matrices + bias)


def _norm_params(m: Transformer) -> float:
    return float(m.hidden if m.rms_norm else 2 * m.hidden)


def _moe_layer_params(m: Transformer) -> tuple[float, float, float]:
    """(routed experts, shared experts, router) parameters of one MoE layer."""
    assert m.moe is not None
    e = m.moe
    return (
        e.experts * _ffn_params(m, e.expert_ffn),
        e.shared_experts * _ffn_params(m, e.expert_ffn),
        float(m.hidden * e.experts),
    )


def parameter_count(m: Transformer) -> ParameterCount:
    """Parameter counts (kipply 2022: 4·d² attention and 2·d·f or 3·d·f FFN per layer, plus vocabulary · d)."""
    table = float(m.vocab * m.hidden)
    embedding_ = table * (1 if m.tied_embeddings else 2) + m.position_table * m.hidden
    attn = m.layers * _attention_params(m)
    norms = (2 * m.layers + 1) * _norm_params(m)
    if m.moe is None:
        ffn = m.layers * _ffn_params(m, m.ffn)
        active_ffn = ffn
    else:
        routed, shared, router = _moe_layer_params(m)
        moe_layers = m.moe.moe_layers(m.layers)
        dense = (m.layers - moe_layers) * _ffn_params(m, m.ffn)
        ffn = dense + moe_layers * (routed + shared + router)
        active_ffn = dense + moe_layers * (routed * m.moe.top_k / m.moe.experts + shared + router)
    total = embedding_ + attn + norms + ffn
    active = embedding_ + attn + norms + active_ffn  # as model cards count it: every table, k experts
    return ParameterCount(total, embedding_, attn, ffn, norms, active)


def touched_experts(experts: float, top_k: float, tokens: Array | float) -> Array:
    """Experts a batch of `tokens` routed top-k among `experts` uses, in expectation under uniform routing:
    E·(1 − (1 − k/E)^tokens)."""
    out: Array = experts * (1.0 - (1.0 - top_k / experts) ** np.asarray(tokens, dtype=np.float64))
    return out


def _stages(m: Transformer, p: int) -> list[NDArray[np.int64]]:
    return [np.asarray(s, dtype=np.int64) for s in np.array_split(np.arange(m.layers), p)]


def is_window_layer(m: Transformer, index: NDArray[np.int64]) -> NDArray[np.bool_]:
    if m.window is None or m.window_layers == 0:
        return np.zeros(index.shape, dtype=bool)
    if m.window_layers >= m.layers:
        return np.ones(index.shape, dtype=bool)
    # Gemma 2 alternates local and global layers, local first.
    out: NDArray[np.bool_] = index % 2 == 0
    return out


def kv_heads_per_device(m: Transformer, t: int) -> float:
    """KV heads one device holds: split over the tensor-parallel group, replicated when there are fewer than t."""
    return max(1.0, m.kv_heads / t)


def expert_shard(m: Transformer, par: Parallelism) -> float:
    """How many ways the routed experts' weights are split: over the tensor group, or over the expert group when
    it is larger (then each device holds E/expert whole experts)."""
    return float(max(par.tensor, par.expert))


@functools.lru_cache(maxsize=4096)
def weights_per_device(m: Transformer, par: Parallelism, prec: Precision) -> float:
    """Weight bytes on the busiest pipeline stage: its layers' matrices split over the tensor group (KV
    projections replicated when kv_heads < tensor), norms replicated, the vocabulary split over the tensor group
    (Megatron's vocabulary-parallel embedding), the input table on the first stage and the LM head on the last. The
    attention matrices at `Precision.attention` where one is set."""
    t, w, tab = par.tensor, dtype_bytes(prec.weights), dtype_bytes(prec.tables)
    d, hd = m.hidden, m.head_dim
    attn_matrices = (d * m.heads * hd * 2) / t + 2 * d * hd * kv_heads_per_device(m, t)
    if m.mla is not None:
        replicated, split = _mla_params(m)
        attn_matrices = replicated + split / t
    attn_bias = ((m.heads + 2 * m.kv_heads) * hd / t + d) if m.bias else 0.0
    attn_w = w if prec.attention is None else dtype_bytes(prec.attention)
    layer_fixed = attn_matrices * attn_w + (attn_bias + 2 * _norm_params(m)) * tab
    dense_ffn = _ffn_params(m, m.ffn) / t * w
    if m.moe is not None:
        routed, shared, router = _moe_layer_params(m)
        moe_ffn = routed / expert_shard(m, par) * w + shared / t * w + router * tab
    else:
        moe_ffn = dense_ffn
    table = m.vocab * d / t * tab
    stages = _stages(m, par.pipeline)
    worst = 0.0
    for index, layers in enumerate(stages):
        n_moe = float(np.sum(m.moe.is_moe_layer(layers))) if m.moe is not None else 0.0
        n_dense = float(layers.size) - n_moe
        total = layers.size * layer_fixed + n_dense * dense_ffn + n_moe * moe_ffn
        if index == 0:
            total += table + m.position_table * d * tab
        if index == len(stages) - 1:
            total += _norm_params(m) * tab
            if not m.tied_embeddings or len(stages) > 1:
                total += table
        worst = max(worst, total)
    return worst


@functools.lru_cache(maxsize=4096)
def kv_bytes_per_sequence(m: Transformer, par: Parallelism, prec: Precision, tokens: float) -> float:
    """KV cache of one sequence of `tokens` on the busiest stage: 2 · layers · kv_heads · head_dim · tokens ·
    size(kv) (kipply 2022), with kv_heads per device and windowed layers holding at most `window` tokens."""
    per_token_layer = 2.0 * kv_heads_per_device(m, par.tensor) * m.head_dim * dtype_bytes(prec.kv_cache)
    if m.mla is not None:  # one latent per token, held whole by every device of the tensor group
        per_token_layer = m.mla.latent * dtype_bytes(prec.kv_cache)
    worst = 0.0
    for layers in _stages(m, par.pipeline):
        local = is_window_layer(m, layers)
        window = float(m.window) if m.window is not None else tokens
        held = float(np.sum(np.where(local, min(tokens, window), tokens)))
        worst = max(worst, held * per_token_layer)
    return worst


def activation_bytes_per_sequence(
    m: Transformer, par: Parallelism, prec: Precision, prompt: float, naive: bool
) -> float:
    """Peak transient bytes per sequence of a prefill micro-batch: the residual stream, the widest intermediate one
    kernel writes (QKV, the FFN's up projection or, for eager attention, the score matrix) and fp32 logits."""
    t = par.tensor
    h_dev, kvh_dev = m.heads / t, kv_heads_per_device(m, t)
    g = 2 if m.gated else 1
    widths = [(h_dev + 2 * kvh_dev) * m.head_dim]
    if m.moe is None or m.moe.moe_layers(m.layers) < m.layers:  # a dense FFN runs in some layer
        widths.append(g * m.ffn / t)
    if m.mla is not None:
        widths.append(h_dev * (m.mla.nope_dim + max(m.mla.rope_dim, m.mla.v_dim)))
    if m.moe is not None:
        widths.append(g * (m.moe.top_k + m.moe.shared_experts) * m.moe.expert_ffn / t)
    widest = max(widths) * prompt
    if naive:
        keys = min(prompt, m.window) if m.window is not None and m.window_layers >= m.layers else prompt
        widest = max(widest, h_dev * prompt * keys)
    return (prompt * m.hidden + widest) * dtype_bytes(prec.activations) + m.vocab / t * 4.0
