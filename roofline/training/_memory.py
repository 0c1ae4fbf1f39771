"""Memory of one training device: parameters of the busiest pipeline stage, their gradients and optimizer states
under ZeRO / FSDP sharding, and activations under the recomputation policy (Korthikanti et al. 2022)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from roofline._hardware import dtype_bytes
from roofline.inference import parameter_count
from roofline.training._config import TrainingRun

# Mixed-precision Adam (Rajbhandari et al. 2020, ZeRO §3: "2Ψ + 2Ψ + 12Ψ", K = 12): fp32 master weights, first and
# second moments. SGD with momentum keeps fp32 master weights and one momentum buffer (K = 8).
STATE_COPIES = {"adamw": 3, "sgd": 2}


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes on the busiest device (the first pipeline stage, which holds the most micro-batches in flight).
    Communication buffers: `gradient_bucket_bytes` (data-parallel buckets that copy the gradients) and
    `gathered_bytes` (FSDP / ZeRO-3's unsharded layers and the gradient awaiting its reduce-scatter).
    `activations_per_sample_bytes` is what one more sequence in the micro-batch adds (for the largest fit)."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    gradient_bucket_bytes: float
    gathered_bytes: float
    capacity_bytes: float
    activations_per_sample_bytes: float

    @property
    def buffers_bytes(self) -> float:
        return self.gradient_bucket_bytes + self.gathered_bytes

    @property
    def total_bytes(self) -> float:
        return (
            self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes
            + self.buffers_bytes
        )  # fmt: skip

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


def stage_parameters(run: TrainingRun) -> tuple[float, float]:
    """Parameters on one device of the busiest stage, and of one of its layers: a stage's L/p layers split over
    the tensor group (experts over the expert group), plus a vocabulary table split over the tensor group (the
    embedding on the first stage, the LM head on the last; Megatron-LM keeps a copy of a tied table on both)."""
    m, par = run.model, run.parallelism
    pc = parameter_count(m)
    layer_norms = pc.norms * (2 * m.layers) / (2 * m.layers + 1)
    ffn = pc.ffn
    if m.moe is not None and par.expert > 1:
        moe_layers = m.moe.moe_layers(m.layers)
        routed = moe_layers * (3.0 if m.gated else 2.0) * m.hidden * m.moe.expert_ffn * m.moe.experts
        ffn = ffn - routed + routed / par.expert
    layer = ((pc.attention + ffn) / par.tensor + layer_norms) / m.layers
    table = m.vocab * m.hidden / par.tensor + m.position_table * m.hidden
    return layer * m.layers / par.pipeline + table, layer


def activation_bytes_per_layer(run: TrainingRun, micro_batch: float | None = None) -> float:
    """Activation bytes one layer keeps for its backward, per micro-batch (Korthikanti et al., arXiv 2205.05198,
    §4 and Table 2), with 16-bit activations and 1-byte dropout masks:

    attention 11·s·b·h + 5·a·s²·b, MLP 19·s·b·h, norms 4·s·b·h: s·b·h·(34 + 5·a·s/h) without parallelism. Tensor
    parallelism splits all but the norms' and dropouts' 10·s·b·h: s·b·h·(10 + 24/t + 5·a·s/(h·t)); with sequence
    parallelism those are split too: s·b·h·(34 + 5·a·s/h)/t. Selective recomputation (and FlashAttention, which
    keeps no s² tensor; Dao et al. 2022) drops the 5·a·s/h term; full recomputation keeps the layer's input,
    2·s·b·h (Table 2). Generalised from the GPT block to an FFN of width f (4·s·b·f, or 6·s·b·f gated, in place
    of 16·s·b·h) and grouped KV heads (K and V at kv_heads·head_dim wide). s is the device's share under context
    parallelism."""
    m, par = run.model, run.parallelism
    t = par.tensor
    s = run.sequence / par.context
    b = float(run.micro_batch if micro_batch is None else micro_batch)
    h = float(m.hidden)
    sbh = s * b * h
    if run.recompute == "full":
        return 2.0 * sbh  # Table 2's full recomputation: the layer's input only
    r = m.kv_heads * m.head_dim / h
    q = m.heads * m.head_dim / h
    ffn = float(m.ffn)
    if m.moe is not None:  # averaged over the layers, dense and MoE
        share = m.moe.moe_layers(m.layers) / m.layers
        ffn = share * m.moe.expert_ffn * m.moe.top_k + (1.0 - share) * m.ffn
    ffn /= h
    # Split by tensor parallelism: Q, K, V (QKᵀ and the attention over V), the projection's input, the FFN's
    # activation input and output; the GPT block's 24.
    split = 2.0 * q + 4.0 * r + 2.0 * q + (6.0 if m.gated else 4.0) * ffn
    replicated = 10.0  # two norms' inputs (4), the QKV and FFN inputs (4), two dropout masks (2)
    scores = 5.0 * m.heads * s / h if run.recompute == "none" and run.attention == "naive" else 0.0
    if par.sequence_parallel:
        return sbh * (replicated + split + scores) / t
    return sbh * (replicated + (split + scores) / t)


def activation_bytes(run: TrainingRun, micro_batch: float | None = None) -> float:
    """Activations the first stage holds at its peak: its L/p layers for min(p, m) micro-batches in flight under
    1F1B (Korthikanti §4.2.3: L layers' worth of one micro-batch), × (1 + (p − 1)/(p·v)) interleaved; under full
    recomputation also one layer's activations while it is recomputed."""
    m, par = run.model, run.parallelism
    p = par.pipeline
    in_flight = min(p, max(1, run.micro_batches))
    factor = 1.0 + (p - 1) / (p * par.virtual_stages) if par.schedule == "interleaved" else 1.0
    total = activation_bytes_per_layer(run, micro_batch) * m.layers / p * in_flight * factor
    if run.recompute == "full":
        total += activation_bytes_per_layer(replace(run, recompute="none"), micro_batch)
    return total


def communication_buffers(run: TrainingRun, params: float, layer: float) -> tuple[float, float]:
    """Bytes of the data-parallel reduction's buffers on one device: (gradient buckets, gathered layers).

    Unsharded gradients (ZeRO 0-1) are reduced in buckets. Megatron-LM's buckets are views into its contiguous
    gradient buffer, where `param.main_grad` already lives (megatron/core/distributed/param_and_grad_buffer.py,
    Megatron-Core 0.16.1: `grad_data = torch.zeros(...)`, :803; `param.main_grad = self._get(...)`, :837): no bytes
    beyond the gradients. PyTorch DDP packs gradients into `bucket_cap_mb` = 25 MiB buckets allocated for every
    parameter, as copies unless `gradient_as_bucket_view=True` (torch/nn/parallel/distributed.py, torch 1.13.1:
    defaults :540-543, `bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024)` :646; its docstring :477: a view saves
    "the total gradients size"): one more copy of the gradients.

    FSDP / ZeRO-3 gathers each unit's full parameters before it runs and frees them after; with backward prefetch
    the next unit's are gathered while the current one runs (`backward_prefetch_limit = 1`,
    torch/distributed/fsdp/fully_sharded_data_parallel.py:1046): two layers, one without. Its post-backward hook
    reduce-scatters the unit's whole unsharded gradient (`grad_flatten.chunk(world_size)`, :3294-3297): one more
    layer until the reduce-scatter ends."""
    par, sh = run.parallelism, run.sharding
    group = sh.shard_group or par.data
    s_w = dtype_bytes(run.precision.compute)
    buckets = params * s_w if sh.stage <= 1 and par.data > 1 and run.gradient_buckets == "copies" else 0.0
    gathered = 0.0
    if sh.stage >= 3 and group > 1:
        gathered = ((2.0 if run.overlap.fsdp_prefetch else 1.0) + 1.0) * layer * s_w
    return buckets, gathered


def training_memory(run: TrainingRun) -> TrainingMemory:
    """Weights, gradients, optimizer states, activations and communication buffers on the busiest device.

    Bytes per parameter (ZeRO §3): weights and gradients in the compute dtype, fp32 master weights and states;
    16 for mixed-precision Adam. ZeRO stage 1 divides the states by the sharding group, 2 also the gradients, 3
    (FSDP) also the weights; the buffers are `communication_buffers`'."""
    par, sh = run.parallelism, run.sharding
    params, layer = stage_parameters(run)
    s_w = dtype_bytes(run.precision.compute)
    # Without mixed precision the weights are the master copy: only the optimizer's own states remain.
    master = dtype_bytes(run.precision.master) if run.precision.mixed else 0.0
    states = master + (STATE_COPIES[run.optimizer] - 1) * dtype_bytes(run.precision.optimizer_states)
    group = float(sh.shard_group or par.data)
    stage = sh.stage
    weights = params * s_w / (group if stage >= 3 else 1.0)
    grads = params * s_w / (group if stage >= 2 else 1.0)
    optimizer = params * states / (group if stage >= 1 else 1.0)
    buckets, gathered = communication_buffers(run, params, layer)
    acts = activation_bytes(run)
    return TrainingMemory(
        weights, grads, optimizer, acts, buckets, gathered, run.system.hardware.memory_capacity_bytes,
        acts / run.micro_batch,
    )  # fmt: skip
