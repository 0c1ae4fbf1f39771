"""The op list of a layer: every kernel (and collective) one device runs in one forward pass through the model's
layers, registered with the evaluator as calls over the pass's sample points.

Per layer: the attention norm; the QKV projection, rotary and attention (or DeepSeek's latent attention); the
output projection; Megatron's all-reduce when the layer is split over a tensor group; the FFN norm; a dense FFN or
the routed (and shared) experts with their all-to-all; and, once per pass, the embedding lookup, the final norm and
the LM head.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from roofline._hardware import dtype_bytes
from roofline._num import Array
from roofline.inference._config import InferenceRun, IntArray
from roofline.inference._evaluation import Call, Evaluator
from roofline.inference._memory import expert_shard, is_window_layer, kv_heads_per_device
from roofline.inference._phase import Pass
from roofline.ops import DECODE_MAX_PACKED_GROUP

# Blackwell's MLA decode kernel (CUTLASS sm100 MLA, as shipped in FlashInfer 0.7.2:
# include/flashinfer/attention/blackwell/kernel/sm100_fmha_mla_tma_warpspecialized.hpp l. 86,
# `static_assert(TileShapeH{} == 128)`) holds 128 query heads of one sequence in a thread block, so each latent tile
# is read once for all of them: a device reads its latent cache ⌈heads / 128⌉ times per step.
MLA_DECODE_TILE_HEADS = 128.0

# PyTorch's softmax keeps a row of at most 1024 elements in registers (one pass, online max and sum); longer rows go
# to its block softmax, which reads the input three times (aten/src/ATen/native/cuda/SoftMax.cu, host_softmax; the
# same rule bench/validate.py applies to LLMCompass's measured softmax).
ONLINE_SOFTMAX_MAX_COLS = 1024

FUSED_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu", "silu": "silu", "relu": "relu"}
GATED_ACTIVATION = {"gelu": "geglu", "gelu_tanh": "geglu", "silu": "swiglu"}


class LayerOps:
    """Registers the ops of one forward pass through every layer, per device and per micro-batch, into `ps`.

    `tokens` (new tokens in the micro-batch) and `sequences` are arrays over the samples; `attn` is (sequences, query
    length, keys) per attention point (one per sample in the decode; one per distinct prompt length in the prefill).
    """

    def __init__(
        self,
        run: InferenceRun,
        ev: Evaluator,
        ps: Pass,
        tokens: Array,
        attn: tuple[Array, Array, Array],
        sequences: Array,
        prefill: bool,
    ) -> None:
        self.run, self.ev, self.ps, self.sequences, self.prefill = run, ev, ps, sequences, prefill
        m, par, prec = run.model, run.parallelism, run.precision
        self.m, self.par, self.prec = m, par, prec
        self.t, self.fused = par.tensor, run.fused
        self.act = prec.activations
        self.s_act = dtype_bytes(self.act)
        self.w_factor = dtype_bytes(prec.weights) / self.s_act
        self.table_factor = dtype_bytes(prec.tables) / self.s_act
        self.kv_factor = dtype_bytes(prec.kv_cache) / self.s_act
        self.attn_dtype = prec.attention  # None: the attention projections as every linear layer
        self.d, self.hd = float(m.hidden), float(m.head_dim)
        self.h_dev, self.kvh_dev = m.heads / self.t, kv_heads_per_device(m, self.t)
        self.g = 2.0 if m.gated else 1.0
        self.layers = float(m.layers)
        self.bias: tuple[str, ...] = ("bias",) if m.bias else ()

        # Everything but attention depends only on the tokens in the pass: evaluated once per distinct count.
        self.tok, self.inv = _unique(tokens)

        # Fused, the up projection's epilogue applies the activation; a gated pair writes act(gate)·up, half of
        # the product's columns.
        self.up_epilogue = (*self.bias, FUSED_ACTIVATION[m.activation])
        self.up_out = 0.5 if m.gated and self.fused else 1.0

        window = is_window_layer(m, np.arange(m.layers))
        self.n_local = float(window.sum())
        self.n_moe = float(m.moe.moe_layers(m.layers)) if m.moe is not None else 0.0
        self.n_dense = self.layers - self.n_moe

        self.a_seq, self.a_q, self.a_kv = attn
        self.a_index = np.zeros(0, dtype=np.int64) if prefill else np.arange(self.a_seq.size, dtype=np.int64)

    def register(self) -> None:
        """Every op of the pass, in the order a layer runs them (the order of the breakdown's rows)."""
        self.embedding()
        self.norm("attention_norm", self.layers)
        attention_out = self.attention() if self.m.mla is None else self.latent_attention()
        self.linear("output_projection", self.d, attention_out, self.layers, (*self.bias, "residual"), attention=True)
        if not self.fused:
            self.residual_add(self.layers)
        self.tensor_parallel_all_reduce()
        self.norm("ffn_norm", self.layers)
        if self.n_dense > 0:
            self.dense_ffn()
        if self.m.moe is not None and self.n_moe > 0:
            self.experts()
        self.lm_head()

    # -- the kinds of op ------------------------------------------------------------------------------------------

    def call(
        self, op: str, sizes: dict[str, Array], static: dict[str, Any], index: IntArray,
        adjust: tuple[tuple[str, float], ...] = (),
    ) -> Call:  # fmt: skip
        """Register one op (a `roofline.ops` function's keyword arguments) at the pass's points."""
        items = tuple(sorted(static.items()))
        sys_ = self.run.system
        act = self.run.precision.activations
        return self.ev.add(Call(sys_.hardware, op, items, sizes, index, act, adjust, sys_.correct, sys_.intervals))

    def linear(
        self, name: str, n: Array | float, k: Array | float, count: float, epilogue: tuple[str, ...] = (),
        out: float = 1.0, rows: Array | None = None, batch: Array | float = 1.0, weight: float | None = None,
        index: IntArray | None = None, attention: bool = False,
    ) -> None:  # fmt: skip
        """y = x·W: a matmul whose B operand (the weights) is read at the weight dtype's size. An attention
        projection (`attention`) runs at `Precision.attention`, its weights stored at that type, where one is set."""
        mm = self.tok if rows is None else rows
        sizes = {name_: _full(value, mm.shape) for name_, value in (("m", mm), ("n", n), ("k", k), ("batch", batch))}
        own = attention and self.attn_dtype is not None  # an attention projection at its own type, weights too
        dtype = str(self.attn_dtype) if own else self.act
        factor = 1.0 if own else self.w_factor
        adjust: tuple[tuple[str, float], ...] = (("b_operand", factor if weight is None else weight),)
        if out != 1.0:
            adjust = (*adjust, ("out", out))
        epi = tuple(e for e in epilogue if self.fused or e == "bias")  # eager linear layers add their bias (addmm)
        static: dict[str, Any] = {"dtype": dtype, "epilogue": epi, "fuse_epilogue": True}
        index = self.inv if index is None else index
        block = weight is None and dtype == "fp8" and self.prec.fp8_scaling == "block"
        if block:  # block-scaled fp8: the scheme's own kernels, its per-token-group quantisation included
            static = {**static, "dtype": "bf16", "quantization": "fp8_block"}
        self.ps.add(name, self.call("matmul", sizes, static, index, adjust), count)
        if weight is None and not block and dtype_bytes(dtype) < 2.0:
            self.quantize(name, sizes, dtype, count, index)

    def quantize(self, name: str, sizes: dict[str, Array], dtype: str, count: float, index: IntArray) -> None:
        """The kernel that quantises a narrow linear layer's 16-bit input, once per call: it reads the m·k input at
        2 bytes and writes it at the narrow type's (NVFP4's per-16 scales included). The serving engines run it
        before each quantised GEMM: TensorRT-LLM's linear layer (`static_quantize_e4m3_per_tensor`, `fp4_quantize`,
        the per-token-group fp8 kernel; `roofline.ops.QUANTIZATIONS`' sources, decision 0028) and vLLM's
        (`Fp8LinearMethod`: `scaled_fp8_quant`). Weight-only layers (16-bit activations) have none."""
        elements = sizes["m"] * sizes["k"] * sizes["batch"]
        static = {"inputs": 1, "outputs": dtype_bytes(dtype) / 2.0, "flops_per_element": 2.0, "dtype": "bf16"}
        self.ps.add(name + "_quantize", self.call("elementwise", {"elements": elements}, static, index), count)

    def vector(self, name: str, op: str, count: float, static: dict[str, Any], **sizes: Array | float) -> None:
        """A memory-bound op over the pass's tokens."""
        shaped = {k: _full(v, self.tok.shape) for k, v in sizes.items()}
        self.ps.add(name, self.call(op, shaped, {"dtype": self.act, **static}, self.inv), count)

    def norm(
        self, name: str, count: float, rows: Array | None = None, index: IntArray | None = None,
        cols: float | None = None,
    ) -> None:  # fmt: skip
        """A layer (or RMS) norm of `rows` rows (default: the pass's tokens) of `cols` (default: hidden)."""
        rows = self.tok if rows is None else rows
        index = self.inv if index is None else index
        sizes = {"rows": rows, "cols": _full(self.d if cols is None else cols, rows.shape)}
        self.ps.add(name, self.call("layernorm", sizes, {"dtype": self.act, "rms": self.m.rms_norm}, index), count)

    def activation(self, name: str, elements: Array, count: float) -> None:
        """An FFN's activation as its own kernel; fused, it is the up projection's epilogue and nothing is added."""
        if self.fused:
            return
        m = self.m
        if m.gated and m.activation not in GATED_ACTIVATION:  # ReGLU: relu(gate) · up
            static = {"inputs": 2, "outputs": 1, "flops_per_element": 2.0}
            self.vector(name, "elementwise", count, static, elements=elements)
        else:
            fn = GATED_ACTIVATION[m.activation] if m.gated else m.activation
            self.vector(name, "activation", count, {"function": fn}, elements=elements)

    def residual_add(self, count: float) -> None:
        """An unfused residual add: two inputs, one output of the hidden size per token."""
        static = {"inputs": 2, "outputs": 1, "flops_per_element": 1.0}
        self.vector("residual_add", "elementwise", count, static, elements=self.tok * self.d)

    # -- embedding and attention ----------------------------------------------------------------------------------

    def embedding(self) -> None:
        """Embedding lookup: each device gathers the rows of its vocabulary slice (Megatron), all-reduced with the
        first all-reduce; modelled as one gather of every token's row."""
        tok, m = self.tok, self.m
        embed = {"tokens": tok, "hidden": _full(self.d, tok.shape), "vocab": _full(m.vocab / self.t, tok.shape)}
        self.ps.add("embedding", self.call("embedding", embed, {"dtype": self.prec.tables}, self.inv), 1.0)

    def attention(self) -> float:
        """QKV (heads split over the tensor group), rotary, attention; the width of the attention's output."""
        qkv = (self.h_dev + 2 * self.kvh_dev) * self.hd
        self.linear("qkv_projection", qkv, self.d, self.layers, self.bias, attention=True)
        if self.m.rotary and not self.fused:  # fused: applied inside the attention kernel (its FLOPs are negligible)
            heads = self.h_dev + self.kvh_dev
            self.vector("rotary", "rotary", self.layers, {}, tokens=self.tok, heads=heads, head_dim=self.hd)
        self.attend(self.h_dev, self.kvh_dev, self.hd, self.hd, self.kv_factor, self.kv_factor)
        return self.h_dev * self.hd

    def latent_attention(self) -> float:
        """Multi-head latent attention (DeepSeek-V2 §2.1): down projections to the query bottleneck and to the
        cached latent (replicated over the tensor group), then, in the prefill, the latent is projected up to
        per-head keys and values and attended as MHA; in the decode the up projections are absorbed (DeepSeek-V2
        §2.1.2; FlashMLA): queries move into the latent space, attention runs over the latent as MQA (the latent
        read once as keys and values), and the result moves back to per-head values. Returns the output's width."""
        m, layers, d, h_dev = self.m, self.layers, self.d, self.h_dev
        a = m.mla
        assert a is not None
        qk = float(a.nope_dim + a.rope_dim)
        if a.q_lora_rank:
            self.linear("q_down_projection", float(a.q_lora_rank), d, layers, attention=True)
            self.norm("q_norm", layers, cols=float(a.q_lora_rank))
        self.linear("q_up_projection", h_dev * qk, float(a.q_lora_rank or d), layers, attention=True)
        self.linear("kv_down_projection", float(a.latent), d, layers, attention=True)
        self.norm("kv_norm", layers, cols=float(a.kv_lora_rank))
        if m.rotary and not self.fused:
            self.vector("rotary", "rotary", layers, {}, tokens=self.tok, heads=h_dev + 1.0, head_dim=float(a.rope_dim))
        if self.prefill:
            self.linear(
                "kv_up_projection", h_dev * (a.nope_dim + a.v_dim), float(a.kv_lora_rank), layers, attention=True
            )
            self.attend(h_dev, h_dev, qk, float(a.v_dim), 1.0, 1.0)
        else:
            self.linear("q_absorb", float(a.kv_lora_rank), float(a.nope_dim), layers, batch=h_dev, attention=True)
            latent, lora = float(a.latent), float(a.kv_lora_rank)
            # More heads than a packed decode group (attention data parallelism: all heads on each device): the
            # op's packed groups of `DECODE_MAX_PACKED_GROUP` heads keep the FLOPs and the tiles, and the latent's
            # reads are scaled to the MLA kernel's, once per `MLA_DECODE_TILE_HEADS` heads.
            groups = max(1.0, float(np.ceil(h_dev / DECODE_MAX_PACKED_GROUP)))
            reads = float(np.ceil(h_dev / MLA_DECODE_TILE_HEADS)) / groups if groups > 1.0 else 1.0
            kv_read = self.kv_factor * reads
            self.attend(h_dev, groups, latent, lora, kv_read, kv_read * latent / (latent + lora))
            self.linear("v_absorb", float(a.v_dim), lora, layers, batch=h_dev, attention=True)
        return h_dev * a.v_dim

    def attend(
        self, heads: float, kv_heads: float, qk_dim: float, v_dim: float, kv_read: float, flash_read: float
    ) -> None:
        """Attention of `heads` query heads over `kv_heads` K/V heads (keys of qk_dim, values of v_dim), in global
        and windowed layers. K and V are read at `kv_read` times the activation size (eager: the B operands) or
        `flash_read` times what the flash kernel's K and V would be (a latent read once for both)."""
        m = self.m
        for count, local in ((self.layers - self.n_local, False), (self.n_local, True)):
            if count == 0:
                continue
            kv = np.minimum(self.a_kv, float(m.window)) if local and m.window is not None else self.a_kv
            # A prompt longer than the window: each query sees a band of `window` keys. A non-causal q × window
            # block has the band's pairs and reads K/V as a banded flash kernel does (the first window's
            # triangle is counted in full: at most window / 2q over).
            causal = not bool(np.any(kv < self.a_q))
            if self.run.attention == "flash":
                self.flash_attention(count, kv, causal, heads, kv_heads, (qk_dim + v_dim) / 2, flash_read)
            else:
                self.eager_attention(count, kv, heads, kv_heads, qk_dim, v_dim, kv_read)

    def flash_attention(
        self, count: float, kv: Array, causal: bool, heads: float, kv_heads: float, head_dim: float, read: float
    ) -> None:
        """One flash-attention kernel. One head dimension for both products: (qk + v)/2 gives their FLOPs and K + V
        bytes exactly."""
        a_seq = self.a_seq
        sizes = {
            "batch": a_seq, "heads": _full(heads, a_seq.shape), "kv_heads": _full(kv_heads, a_seq.shape),
            "head_dim": _full(head_dim, a_seq.shape), "q_len": self.a_q, "kv_len": kv,
        }  # fmt: skip
        static = {"dtype": self.act, "causal": causal, "implementation": "flash"}
        self.ps.add("attention", self.call("attention", sizes, static, self.a_index, (("external", read),)), count)

    def eager_attention(
        self, count: float, kv: Array, heads: float, kv_heads: float, qk_dim: float, v_dim: float, kv_read: float
    ) -> None:
        """Eager attention (PyTorch without a fused kernel; seed 004's calculator): S = Q·Kᵀ per KV head for its
        group of query heads, softmax, O = S·V, three kernels through device memory; K and V are the B operands."""
        a_seq, a_q, a_index = self.a_seq, self.a_q, self.a_index
        mm = {"m": heads / kv_heads * a_q, "batch": a_seq * kv_heads}
        static = {"dtype": self.act, "epilogue": (), "fuse_epilogue": True}
        adjust = (("b_operand", kv_read),)
        scores = self.call("matmul", {**mm, "n": kv, "k": _full(qk_dim, kv.shape)}, static, a_index, adjust)
        self.ps.add("attention_scores", scores, count)
        rows = a_seq * heads * a_q
        for online in (True, False):
            share = (kv <= ONLINE_SOFTMAX_MAX_COLS) == online
            if np.any(share):
                sm = self.call("softmax", {"rows": rows, "cols": kv}, {"dtype": self.act, "online": online}, a_index)
                self.ps.add("softmax", sm, count, share.astype(np.float64))
        values = self.call("matmul", {**mm, "n": _full(v_dim, kv.shape), "k": kv}, static, a_index, adjust)
        self.ps.add("attention_values", values, count)

    # -- communication, FFN and the LM head -----------------------------------------------------------------------

    def tensor_parallel_all_reduce(self) -> None:
        """Megatron: one all-reduce of the block's output after attention and one after the FFN."""
        if self.t > 1:
            algorithm = "custom" if self.run.tensor_all_reduce == "custom" else "auto"
            message = self.tok * self.d * self.s_act
            coll = self.ev.collective(self.run.system, "all_reduce", self.t, message, self.act, algorithm)
            self.ps.comm["tensor_parallel_all_reduce"] = (coll, self.inv, 2.0 * self.layers)

    def dense_ffn(self) -> None:
        """Up projection (with the activation as its epilogue when fused), activation, down projection."""
        width = self.m.ffn / self.t
        self.linear("ffn_up", self.g * width, self.d, self.n_dense, self.up_epilogue, self.up_out)
        self.activation("activation", self.tok * width, self.n_dense)
        self.linear("ffn_down", self.d, width, self.n_dense, (*self.bias, "residual"))
        if not self.fused:
            self.residual_add(self.n_dense)

    def experts(self) -> None:
        """A mixture-of-experts FFN: the router, the routed experts as a fused MoE runs them (`roofline.ops.moe`:
        routing, expand, the two grouped GEMMs over the experts the tokens touch, the activation, finalize), shared
        experts, the residual (and shared experts') sum, and the all-to-all of an expert group wider than the tensor
        group."""
        m, d, g, tok, t, n_moe = self.m, self.d, self.g, self.tok, self.t, self.n_moe
        up_epilogue, up_out = self.up_epilogue, self.up_out
        e, ep = m.moe, float(self.par.expert)
        assert e is not None
        # The expert group routes the tokens of its tensor group, or of ep/t replicas when it is wider; each
        # device holds E/ep experts, each split over t/ep devices when ep < t (`expert_shard`).
        split = expert_shard(m, self.par) / ep
        group_tokens = tok * max(1.0, ep / t)
        self.linear("router", float(e.experts), d, n_moe, weight=self.table_factor)
        sizes = {
            "tokens": group_tokens, "hidden": _full(d, tok.shape), "inter": _full(float(e.expert_ffn), tok.shape),
            "top_k": _full(float(e.top_k), tok.shape), "experts": _full(float(e.experts), tok.shape),
            "tensor": _full(split, tok.shape), "expert": _full(ep, tok.shape),
        }  # fmt: skip
        if ep > t:  # the tokens move all to all (below): the device routes and finalizes its own
            sizes["own_tokens"] = tok
        weights = None if self.prec.weights == self.act else self.prec.weights
        static = {"dtype": self.act, "gated": bool(m.gated), "routing": "uniform", "weight_dtype": weights}
        # W8A8 and W4A4 experts as the fused MoE runs its schemes (`roofline.ops.QUANTIZATIONS`): block-scaled fp8,
        # and fp4 as NVFP4 (as the dense layers run a 4-bit product); per-tensor fp8 stays a product at fp8.
        scheme = {"fp4": "nvfp4", "fp8": "fp8_block" if self.prec.fp8_scaling == "block" else "none"}.get(self.act)
        if scheme not in (None, "none") and self.prec.weights == self.act:
            static = {**static, "dtype": "bf16", "weight_dtype": None, "quantization_scheme": scheme}
        self.ps.add("experts", self.call("moe", sizes, static, self.inv), n_moe)
        inputs = 2.0  # the routed experts' sum and the residual
        if e.shared_experts:
            shared = e.shared_experts * e.expert_ffn / t
            self.linear("shared_experts_up", g * shared, d, n_moe, up_epilogue, up_out)
            self.activation("shared_experts_activation", tok * shared, n_moe)
            self.linear("shared_experts_down", d, shared, n_moe)
            inputs += 1.0
        static_sum = {"inputs": inputs, "outputs": 1, "flops_per_element": inputs - 1.0}
        self.vector("experts_combine", "elementwise", n_moe, static_sum, elements=tok * d)
        if ep > t:
            # Dispatch and combine: each device sends its share of the tokens' k copies (Lepikhin et al. 2020).
            message = tok * e.top_k * d * self.s_act / t
            coll = self.ev.collective(self.run.system, "all_to_all", self.par.expert, message, self.act)
            self.ps.comm["expert_all_to_all"] = (coll, self.inv, 2.0 * n_moe)

    def lm_head(self) -> None:
        """Final norm and the LM head on each sequence's last position (vocabulary split over the tensor group)."""
        rows, index = _unique(self.sequences)
        self.norm("final_norm", 1.0, rows, index)
        self.linear("lm_head", self.m.vocab / self.t, self.d, 1.0, rows=rows, weight=self.table_factor, index=index)


def _unique(values: Array) -> tuple[Array, IntArray]:
    uniq, inv = np.unique(values, return_inverse=True)
    return uniq.astype(np.float64), inv.astype(np.int64).reshape(-1)


def _full(value: Array | float, shape: tuple[int, ...]) -> Array:
    if isinstance(value, np.ndarray) and value.shape == shape:
        return value
    out: Array = np.empty(shape)
    out[...] = value
    return out
