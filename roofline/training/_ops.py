"""Every op of one layer's forward and backward pass on one device, costed by the op core (`roofline.ops`).

A linear layer y = x·W (x: tokens × k, W: k × n) runs one matmul forward and two backward, each with its own shape
and tiles: dX = dY·Wᵀ (tokens × k, inner n) and dW = Xᵀ·dY (k × n, inner tokens). FlashAttention-2's backward does
2.5× the forward's matmul FLOPs (five matmuls to the forward's two, recomputing the scores; Dao 2023, §3.2), costed
as the core's forward kernel time × 2.5; unfused attention runs its products as GEMMs (`LayerCosts.batched`).
Norms, activations and the fused bias-dropout-add are memory-bound: their backward reads the saved input and the
incoming gradient and writes one gradient (`roofline.elementwise`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from roofline._hardware import Hardware
from roofline._kernels import Kernel, arr, single
from roofline.intervals import IntervalTable, family, regime
from roofline.ops import activation, attention, cross_entropy, elementwise, layernorm, matmul, softmax
from roofline.training._config import TrainingRun

FLASH_BACKWARD = 2.5  # Dao 2023 (FlashAttention-2), §3.2: backward FLOPs = 2.5 × forward FLOPs

ATTENTION_CORE = ("attention", "attention_scores", "attention_softmax", "attention_dropout", "attention_values")
FUSED_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu", "silu": "silu", "relu": "relu"}
GATED_ACTIVATION = {"gelu": "geglu", "gelu_tanh": "geglu", "silu": "swiglu"}


@dataclass(frozen=True)
class OpCost:
    """One op of a layer (or of the head) on one device for one micro-batch: seconds and FLOPs forward and
    backward; `kind` matmul, attention or memory; `share` the fraction of the layers that run it (a dense FFN or
    the experts, in a model that has both kinds of layer)."""

    name: str
    kind: str
    forward_s: float
    backward_s: float
    forward_flops: float
    backward_flops: float
    share: float = 1.0
    # Factors p10 / time and p90 / time of the forward and backward times (`roofline.intervals`; 1 without a table).
    forward_band: tuple[float, float] = (1.0, 1.0)
    backward_band: tuple[float, float] = (1.0, 1.0)

    def at(self, edge: int) -> OpCost:
        """The op with its times at its bands' lower (0) or upper (1) edge."""
        return replace(self, forward_s=self.forward_s * self.forward_band[edge],
                       backward_s=self.backward_s * self.backward_band[edge])  # fmt: skip


NO_BAND = (1.0, 1.0)


def _time(
    kernels: list[Kernel], hw: Hardware, table: IntervalTable | None = None, kind: str = "elementwise",
    dtype: str = "bf16",
) -> tuple[float, float, tuple[float, float]]:  # fmt: skip
    """Seconds, FLOPs and the band's factors (`kind` and `dtype` name its family; none without a `table`)."""
    est = single(kernels, hw, hw.vector_peak("fp32"), hw.launch_s)  # 16-bit math runs in fp32 (opmath)
    time = float(est.time_s)
    if table is None:
        return time, float(est.flops), NO_BAND
    where = regime(time, float(est.overhead_s), float(est.compute_s), float(est.memory_s))
    return time, float(est.flops), table.band(family(kind, dtype), where)[1].bounds(1.0)


def _sum(parts: list[tuple[float, float, tuple[float, float]]]) -> tuple[float, float, tuple[float, float]]:
    """Kernels run one after another: their seconds and FLOPs added, their bands weighted by their seconds (every
    op at the same edge together)."""
    time = sum(t for t, _, _ in parts)
    flops = sum(f for _, f, _ in parts)
    if time <= 0:
        return time, flops, NO_BAND
    return time, flops, (sum(t * b[0] for t, _, b in parts) / time, sum(t * b[1] for t, _, b in parts) / time)


class LayerCosts:
    """The ops of one transformer layer and of the LM head, per device and micro-batch."""

    def __init__(self, run: TrainingRun) -> None:
        self.run, self.hw = run, run.system.hardware
        self.table = run.system.intervals
        m, par = run.model, run.parallelism
        self.act, self.gemm = run.precision.compute, run.precision.gemm
        self.t = float(par.tensor)
        self.b = float(run.micro_batch)
        self.s = run.sequence / par.context  # this device's tokens of each sequence
        self.tokens = self.b * self.s
        self.rows = self.tokens / self.t if par.sequence_parallel else self.tokens  # rows of norms and dropouts
        self.h = float(m.hidden)

    def linear(self, name: str, n: float, k: float, rows: float | None = None, batch: float = 1.0) -> OpCost:
        """y = x·W: forward x·W, backward dY·Wᵀ and Xᵀ·dY."""
        mm = self.tokens if rows is None else rows
        return self._gemms(name, "matmul", mm, n, k, batch, self.gemm)

    def _gemms(self, name: str, kind: str, rows: float, n: float, k: float, batch: float, dt: str) -> OpCost:
        """C = A·B forward; backward dA = dC·Bᵀ and dB = Aᵀ·dC, each GEMM of its own shape and tiles."""
        hw, tb = self.hw, self.table
        fwd_s, fwd_f, fwd_b = _time(matmul(hw, rows, n, k, batch, dtype=dt), hw, tb, "matmul", dt)
        bwd_s, bwd_f, bwd_b = _sum([
            _time(matmul(hw, rows, k, n, batch, dtype=dt), hw, tb, "matmul", dt),
            _time(matmul(hw, k, n, rows, batch, dtype=dt), hw, tb, "matmul", dt),
        ])  # fmt: skip
        return OpCost(name, kind, fwd_s, bwd_s, fwd_f, bwd_f, 1.0, fwd_b, bwd_b)

    def memory(
        self, name: str, forward: list[Kernel], elements: float, flops_per_element: float, kind: str = "elementwise"
    ) -> OpCost:
        """A memory-bound op (`kind` its interval family); its backward, an elementwise pass, reads the saved input
        and the gradient and writes one gradient."""
        hw, dt, tb = self.hw, self.act, self.table
        fwd_s, fwd_f, fwd_b = _time(forward, hw, tb, kind, dt)
        bwd = elementwise(hw, arr(elements), inputs=2, outputs=1, flops_per_element=flops_per_element, dtype=dt)
        bwd_s, bwd_f, bwd_b = _time(bwd, hw, tb, "elementwise", dt)
        return OpCost(name, "memory", fwd_s, bwd_s, fwd_f, bwd_f, 1.0, fwd_b, bwd_b)

    def norm(self, name: str) -> OpCost:
        hw, rows, h, rms = self.hw, self.rows, self.h, self.run.model.rms_norm
        kernels = layernorm(hw, arr(rows), arr(h), self.act, rms=rms)
        return self.memory(name, kernels, rows * h, 8.0, "rmsnorm" if rms else "layernorm")

    def dropout_add(self, name: str) -> OpCost:
        """Megatron-LM's fused bias-dropout-add: the branch, its mask and the residual in, the sum out."""
        e = self.rows * self.h
        return self.memory(name, elementwise(self.hw, arr(e), inputs=2, outputs=1, dtype=self.act), e, 2.0)

    def attention_core(self) -> list[OpCost]:
        """softmax(Q·Kᵀ)·V over the device's heads. Under context parallelism each device attends its 1/c of the
        queries (load-balanced causal chunks) to every key, 1/c of the whole sequence's attention.

        Flash: one kernel. Unfused (Megatron-LM's attention in 2022, Korthikanti et al. §4.1): the scores as a batched
        GEMM, Megatron-LM's fused scale-mask-softmax (one warp per row held in registers: one read, one write;
        megatron/fused_kernels/scaled_upper_triang_masked_softmax.h), dropout, and the attention over V as a second
        batched GEMM; each GEMM's backward is two GEMMs of its own shapes, the softmax's a memory-bound pass."""
        m, run, hw = self.run.model, self.run, self.hw
        heads, kv_heads = m.heads / self.t, max(1.0, m.kv_heads / self.t)
        c, s = float(run.parallelism.context), float(run.sequence)
        if run.attention == "flash":
            kernels = attention(hw, self.b, heads, kv_heads, m.head_dim, s, s, True, "flash", self.act)
            fwd_s, fwd_f, band = _time(kernels, hw, self.table, "attention", self.act)
            f = FLASH_BACKWARD
            return [OpCost("attention", "attention", fwd_s / c, f * fwd_s / c, fwd_f / c, f * fwd_f / c, 1.0, band,
                           band)]  # fmt: skip
        batch, q = self.b * heads / c, s
        scores = self.batched("attention_scores", q, s, float(m.head_dim), batch)
        e = batch * q * s
        sm = softmax(hw, arr(batch * q), arr(s), self.act, online=True)
        probs = self.memory("attention_softmax", sm, e, 5.0, "softmax")
        drop = self.memory("attention_dropout", elementwise(hw, arr(e), inputs=1, outputs=1, dtype=self.act), e, 2.0)
        values = self.batched("attention_values", q, float(m.head_dim), s, batch)
        return [scores, probs, drop, values]

    def batched(self, name: str, rows: float, n: float, k: float, batch: float) -> OpCost:
        """A GEMM of two activations (C = A·B per head): forward and its two backward GEMMs, dA = dC·Bᵀ and
        dB = Aᵀ·dC."""
        return self._gemms(name, "attention", rows, n, k, batch, self.act)

    def layer(self) -> list[OpCost]:
        """A layer's ops in the order they run."""
        m, t, h = self.run.model, self.t, self.h
        q = m.heads / t * m.head_dim
        kv = max(1.0, m.kv_heads / t) * m.head_dim
        ops = [self.norm("attention_norm"), self.linear("qkv_projection", q + 2.0 * kv, h), *self.attention_core()]
        ops += [self.linear("output_projection", h, q), self.dropout_add("attention_residual")]
        ops.append(self.norm("ffn_norm"))
        ops += self.ffn()
        ops.append(self.dropout_add("ffn_residual"))
        return ops

    def ffn(self) -> list[OpCost]:
        """Dense FFN, or the routed experts (top-k of them per token, the device's E/ep experts in one batched
        matmul) and shared experts; the activation as its own memory-bound kernel (Megatron-LM's fused bias-gelu)."""
        m, t, h = self.run.model, self.t, self.h
        g = 2.0 if m.gated else 1.0
        fn = GATED_ACTIVATION[m.activation] if m.gated else FUSED_ACTIVATION[m.activation]
        moe_share = m.moe.moe_layers(m.layers) / m.layers if m.moe is not None else 0.0
        widths: list[tuple[str, float, float, float, float]] = []  # name, width, rows, batch, share of layers
        if moe_share < 1.0:
            widths.append(("ffn", m.ffn / t, self.tokens, 1.0, 1.0 - moe_share))
        if m.moe is not None and moe_share > 0.0:
            local = m.moe.experts / self.run.parallelism.expert
            widths.append(("experts", m.moe.expert_ffn / t, self.tokens * m.moe.top_k / local, local, moe_share))
            if m.moe.shared_experts:
                shared = m.moe.shared_experts * m.moe.expert_ffn / t
                widths.append(("shared_experts", shared, self.tokens, 1.0, moe_share))
        ops = []
        for name, f, rows, batch, share in widths:
            e = rows * batch * f
            act = self.memory(f"{name}_activation", activation(self.hw, arr(e), fn, self.act), g * e, 8.0,
                              "activation")  # fmt: skip
            ups = (
                self.linear(f"{name}_up", g * f, h, rows, batch),
                act,
                self.linear(f"{name}_down", h, f, rows, batch),
            )
            ops += [replace(op, share=share) for op in ups]
        return ops

    def head(self) -> list[OpCost]:
        """Once per micro-batch on the last stage: final norm, LM head (vocabulary split over the tensor group) and
        the loss (its backward writes the logits' gradient)."""
        m, hw = self.run.model, self.hw
        v = m.vocab / self.t
        loss = self.memory("loss", cross_entropy(hw, arr(self.tokens), arr(v), self.act), self.tokens * v, 4.0,
                           "cross_entropy")  # fmt: skip
        return [self.norm("final_norm"), self.linear("lm_head", v, self.h), loss]
