"""One optimizer step: the layers' ops (`_ops`) on the busiest device, every collective timed by
`roofline.collective` on the group's topology, the pipeline's bubble and the optimizer's pass.

Ranks are laid out as Megatron-LM lays them out (tensor fastest, then context, data, pipeline), so a group of n
devices `stride` ranks apart spans n · stride consecutive devices: inside a node when they fit, otherwise each
node holds stride-spaced members and the group crosses the scale-out fabric (`group_topology`).

Per micro-batch and layer (Shoeybi et al. 2019, Megatron-LM's f and g operators): two all-reduces of the layer's
activations forward and two backward under tensor parallelism; with sequence parallelism each becomes an all-gather
and a reduce-scatter (Korthikanti et al. 2022, §4.2.2); full recomputation repeats the forward's. Pipeline stages
send activations forward and gradients back, 1/t of them each (the scatter/gather optimisation, Narayanan et al.
2021, §4.1), once per model chunk. The bubble is (p − 1)/m of the ideal time under 1F1B and (p − 1)/(v·m)
interleaved (Narayanan et al. 2021, §2.2). Data parallelism all-reduces the gradients once per step (= reduce-scatter
+ all-gather, seed 001); ZeRO 1-2 reduce-scatter them and all-gather the updated weights; ZeRO-3 / FSDP all-gather
each layer's weights forward and backward and reduce-scatter its gradients in every micro-batch (Rajbhandari et al.
2020; Zhao et al. 2023, PyTorch FSDP), hybrid sharding all-reduces the shard across replicas once per step."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from roofline._hardware import dtype_bytes
from roofline._kernels import arr
from roofline.collectives import Hierarchical, Ring, Switch, Topology, collective, fabric_class
from roofline.intervals import COLLECTIVE, IntervalTable, collective_regime
from roofline.ops import elementwise
from roofline.training._config import TrainingConfigError, TrainingRun, validate_training
from roofline.training._memory import STATE_COPIES, TrainingMemory, stage_parameters, training_memory
from roofline.training._ops import ATTENTION_CORE, LayerCosts, OpCost, _sum, _time
from roofline.training._results import CommunicationRow, OpRow, TrainingEstimate


def group_topology(topology: Callable[[int], Topology], n: int, stride: int) -> Topology:
    """The topology of n devices `stride` ranks apart: `topology(n)` when the n · stride devices share a node;
    otherwise the stride-spaced members of each node joined by the scale-out fabric (one device's share of it)."""
    whole = topology(n * stride)
    if not isinstance(whole, Hierarchical) or not isinstance(whole.outer, Switch | Ring):
        return topology(n) if not isinstance(whole, Hierarchical) else whole
    per_node = max(1, whole.inner.devices // stride)
    outer = replace(whole.outer, devices=n // per_node)
    if per_node == 1:
        return outer
    inner = topology(per_node)
    if isinstance(inner, Hierarchical):
        return whole
    return Hierarchical(inner, outer)


class StepCache:
    """What steps of one model, system, precision, sequence and attention share: a layer's op costs by the shapes
    that set them (tensor, sequence parallelism, micro-batch, context, expert), collective times by (op, devices,
    stride, bytes) and optimizer passes by their size. A search over layouts (`plan_training`) evaluates each once;
    a run whose model, system, precision, sequence or attention differ from the first run's bypasses it."""

    def __init__(self) -> None:
        self.base: TrainingRun | None = None
        self.layers: dict[tuple[object, ...], tuple[list[OpCost], list[OpCost], float, float]] = {}
        self.collectives: dict[tuple[str, int, int, float], float] = {}
        self.optimizer: dict[tuple[float, str], tuple[float, tuple[float, float]]] = {}

    def accepts(self, run: TrainingRun) -> bool:
        base = self.base = self.base or run
        return (
            run.model is base.model and run.system is base.system and run.precision == base.precision
            and run.sequence == base.sequence and run.attention == base.attention
        )  # fmt: skip


def _layer_costs(run: TrainingRun, cache: StepCache | None) -> tuple[list[OpCost], list[OpCost], float, float]:
    """A layer's ops, the head's, and the tokens and hidden width of one micro-batch on a tensor group."""
    par = run.parallelism
    key = (par.tensor, par.sequence_parallel, run.micro_batch, par.context, par.expert)
    if cache is not None and cache.accepts(run) and key in cache.layers:
        return cache.layers[key]
    costs = LayerCosts(run)
    value = (costs.layer(), costs.head(), costs.tokens, costs.h)
    if cache is not None and cache.accepts(run):
        cache.layers[key] = value
    return value


class _Comms:
    """Collectives of the step, each on its group's topology; rows per step on the busiest device."""

    def __init__(self, run: TrainingRun, cache: StepCache | None, edge: int | None = None) -> None:
        if run.system.topology is None and run.parallelism.devices > 1:
            raise TrainingConfigError("hardware", "the profile has no interconnect for a collective")
        self.topology = run.system.topology
        self.rows: list[CommunicationRow] = []
        self.cache = cache.collectives if cache is not None and cache.accepts(run) else None
        # At a band's edge (0 lower, 1 upper), every collective at that edge of the collectives' band.
        self.table: IntervalTable | None = run.system.intervals if edge is not None else None
        self.edge: int | None = edge

    def time(self, op: str, n: int, stride: int, bytes_: float) -> float:
        assert self.topology is not None
        key = (op, n, stride, bytes_)
        if self.cache is not None and key in self.cache:
            return self._at_edge(self.cache[key], bytes_, n, stride)
        try:
            seconds = float(collective(op, bytes_, group_topology(self.topology, n, stride)).time_s)
        except ValueError as err:  # devices the profile's fabrics cannot hold, or sizes past float64
            raise TrainingConfigError("parallelism", str(err)) from None
        if self.cache is not None:
            self.cache[key] = seconds
        return self._at_edge(seconds, bytes_, n, stride)

    def _at_edge(self, seconds: float, bytes_: float, n: int, stride: int) -> float:
        if self.table is None or self.edge is None:
            return seconds
        assert self.topology is not None
        fabric = fabric_class(group_topology(self.topology, n, stride))
        band = self.table.band(COLLECTIVE, collective_regime(float(bytes_), fabric))[1]
        return float(band.bounds(seconds)[self.edge])

    def add(self, name: str, op: str, n: int, stride: int, bytes_: float, calls: float, hidden_under: float) -> None:
        """`calls` of one collective per step, overlapped with `hidden_under` seconds of computation (0: exposed)."""
        if n < 2 or calls <= 0:
            return
        total = self.time(op, n, stride, bytes_) * calls
        self.rows.append(CommunicationRow(name, op, n, bytes_, calls, total, max(0.0, total - hidden_under)))


def optimizer_passes(run: TrainingRun) -> list[tuple[str, float, float, float]]:
    """The optimizer step's memory-bound passes over each of this device's parameters: (name, fp32 words read,
    words written, FLOPs per parameter), as Megatron-Core's mixed-precision optimizer runs them
    (megatron/core/optimizer/optimizer.py, `Float16OptimizerWithFloat16Params.step`, v0.16.1): the compute-dtype
    gradients cast to fp32 main gradients (`_copy_model_grads_to_main_grads`, :754); with fp16, the loss scale's
    unscale and inf/NaN check in place (`_unscale_main_grads_and_check_for_nan`, :496; Micikevicius et al. 2018);
    the gradients' L2 norm for clipping (`clip_grad` 1.0 by default, optimizer_config.py:331; the rescale runs only
    when the norm exceeds it, clip_grads.py:173, so it is not counted); the optimizer's update (AdamW reads the
    master weight, m, v and the gradient and writes the first three; SGD the master weight and momentum); and the
    fp32 master weights copied to the compute-dtype weights (`_copy_main_params_to_model_params`, :774)."""
    master, grad = dtype_bytes(run.precision.master) / 4.0, dtype_bytes(run.precision.compute) / 4.0
    copies = STATE_COPIES[run.optimizer]
    if not run.precision.mixed:  # plain fp32: the gradients and weights are the master's, nothing to cast or copy
        return [("gradient_norm", 1.0, 0.0, 2.0), ("update", copies * master + grad, copies * master, 10.0)]
    passes = [("cast_gradients", grad, 1.0, 1.0)]
    if run.precision.compute == "fp16":
        passes.append(("unscale_gradients", 1.0, 1.0, 2.0))
    passes += [
        ("gradient_norm", 1.0, 0.0, 2.0),
        ("update", master + (copies - 1) + 1.0, master + (copies - 1), 10.0),
        ("copy_weights", master, grad, 1.0),
    ]
    return passes


def _optimizer_s(run: TrainingRun, shard: float, cache: StepCache | None) -> tuple[float, tuple[float, float]]:
    key = (shard, run.optimizer)
    known = cache.optimizer if cache is not None and cache.accepts(run) else {}
    if key not in known:
        hw, table = run.system.hardware, run.system.intervals
        parts = [
            _time(elementwise(hw, arr(shard), ins, outs, flops_per_element=f, dtype="fp32"), hw, table, dtype="fp32")
            for _, ins, outs, f in optimizer_passes(run)
        ]
        time, _, band = _sum(parts)
        known[key] = (time, band)
    return known[key]


def estimate_training(run: TrainingRun, cache: StepCache | None = None) -> TrainingEstimate:
    """Time, FLOPs and memory of one optimizer step of `run` (see the module docstring for what is counted).
    `cache` shares op and collective costs between steps of one model and system (`StepCache`). Raises
    `TrainingConfigError` naming the input at fault."""
    validate_training(run)
    layer, head, tokens, hidden = _layer_costs(run, cache)
    est = _assemble(run, cache, layer, head, tokens, hidden)
    if run.system.intervals is None:
        return est
    # Every op and collective at its band's edge together; what overlap hides moves with them.
    edges = [
        _assemble(run, cache, [o.at(e) for o in layer], [o.at(e) for o in head], tokens, hidden, e).step_s
        for e in (0, 1)
    ]
    return replace(est, step_s_p10=edges[0], step_s_p90=edges[1])


@dataclass(frozen=True)
class _Compute:
    """Seconds per step of the busiest device's ops: forward, backward and recomputed."""

    forward: float
    backward: float
    recompute: float

    @staticmethod
    def of(rows: list[OpRow]) -> _Compute:
        """The sums over the step's op rows."""
        forward, backward = sum(r.forward_s for r in rows), sum(r.backward_s for r in rows)
        return _Compute(forward, backward, sum(r.recompute_s for r in rows))


def _assemble(
    run: TrainingRun, cache: StepCache | None, layer: list[OpCost], head: list[OpCost], tokens: float, hidden: float,
    edge: int | None = None,
) -> TrainingEstimate:  # fmt: skip
    """The step of these op costs (`edge`: the optimizer's passes at that edge of their band too)."""
    rows = _op_rows(run, layer, head)
    compute = _Compute.of(rows)
    comms = _Comms(run, cache, edge)
    _add_model_parallel(run, comms, rows, tokens, hidden)
    per_mb_exposed = sum(r.exposed_s for r in comms.rows) / run.micro_batches
    params, _ = stage_parameters(run)
    dp_exposed = _add_data_parallel(run, comms, params, compute)
    opt_s = _optimizer_step_s(run, params, cache, edge)
    ideal, bubble = _pipeline_s(run, compute, per_mb_exposed)
    model_flops, hardware_flops = _flops(run, layer, head, rows)
    memory = training_memory(run)
    return TrainingEstimate(
        step_s=ideal + bubble + dp_exposed + opt_s, forward_s=compute.forward, backward_s=compute.backward,
        recompute_s=compute.recompute, optimizer_s=opt_s, bubble_s=bubble,
        communication_exposed_s=sum(r.exposed_s for r in comms.rows), micro_batches=run.micro_batches,
        tokens_per_step=float(run.global_batch * run.sequence), model_flops=model_flops,
        hardware_flops=hardware_flops, peak_flops_per_s=run.system.hardware.matrix_peak(run.precision.gemm)[0],
        devices=run.parallelism.devices, ops=tuple(rows), communication=tuple(comms.rows), memory=memory,
        max_micro_batch=_largest_micro_batch(memory), power_w=run.system.power_w,
    )  # fmt: skip


def _op_rows(run: TrainingRun, layer: list[OpCost], head: list[OpCost]) -> list[OpRow]:
    """Each op's seconds per step on the busiest device: the stage's layers' ops and the head's over the
    micro-batches, forward, backward and recomputed."""
    mb = run.micro_batches
    n = run.model.layers / run.parallelism.pipeline  # layers on a stage
    # Selective recomputation re-runs the attention core (Korthikanti §5: QKᵀ, softmax, dropout, attention over V).
    recomputed = {"none": (), "selective": ATTENTION_CORE}.get(run.recompute)
    rows: list[OpRow] = []
    for per_stage, ops in ((n, layer), (1.0, head)):
        for o in ops:
            rc = o.forward_s if ops is layer and (recomputed is None or o.name in recomputed) else 0.0
            count = per_stage * o.share
            rows.append(OpRow(o.name, o.kind, count, mb * count * o.forward_s, mb * count * o.backward_s,
                              mb * count * rc, o))  # fmt: skip
    return rows


def _add_model_parallel(run: TrainingRun, comms: _Comms, rows: list[OpRow], tokens: float, hidden: float) -> None:
    """The collectives of every micro-batch: tensor parallelism's all-reduces (or sequence parallelism's all-gathers
    and reduce-scatters), ring attention's K/V blocks, the experts' all-to-alls and the pipeline's sends."""
    m, par = run.model, run.parallelism
    t, c, p, d, v = par.tensor, par.context, par.pipeline, par.data, par.virtual_stages
    mb = run.micro_batches
    s_act = dtype_bytes(run.precision.compute)
    activations = tokens * hidden * s_act  # one micro-batch's hidden states on a tensor group
    layer_calls = mb * (m.layers / p)
    matmul_s = sum(r.forward_s + r.backward_s + r.recompute_s for r in rows if r.kind == "matmul")
    tp_hidden = matmul_s if run.overlap.tensor_parallel else 0.0
    again = 1.0 if run.recompute == "full" else 0.0
    if par.sequence_parallel:
        calls = layer_calls * (4.0 + 2.0 * again)
        comms.add("tensor_parallel_all_gather", "all_gather", t, 1, activations, calls, tp_hidden / 2)
        comms.add("tensor_parallel_reduce_scatter", "reduce_scatter", t, 1, activations, calls, tp_hidden / 2)
    else:
        comms.add("tensor_parallel_all_reduce", "all_reduce", t, 1, activations, layer_calls * (4.0 + 2.0 * again),
                  tp_hidden)  # fmt: skip
    if c > 1:  # ring attention: K and V blocks around the context group, under the attention kernel
        kv = 2.0 * run.micro_batch * (run.sequence / c) * max(1.0, m.kv_heads / t) * m.head_dim * s_act
        attn = sum(r.forward_s + r.backward_s + r.recompute_s for r in rows if r.kind == "attention")
        comms.add("context_parallel_send_recv", "send_recv", c, t, kv, layer_calls * 3.0 * (c - 1), attn)
    if m.moe is not None and par.expert > 1:
        moe_layers = m.moe.moe_layers(m.layers) / p
        routed = tokens * m.moe.top_k * hidden * s_act
        comms.add("expert_all_to_all", "all_to_all", par.expert, t * c, routed, mb * moe_layers * (4.0 + 2.0 * again),
                  0.0)  # fmt: skip
    if p > 1:  # one send forward and one back per chunk and micro-batch, 1/t of the activations
        comms.add("pipeline_send_recv", "send_recv", 2, t * c * d, activations / t, mb * 2.0 * v, 0.0)


def _add_data_parallel(run: TrainingRun, comms: _Comms, params: float, compute: _Compute) -> float:
    """The gradients' and weights' collectives of data parallelism and sharding; their exposed seconds per step."""
    par, sh = run.parallelism, run.sharding
    t, c, d = par.tensor, par.context, par.data
    mb = run.micro_batches
    group = sh.shard_group or d
    grads = params * dtype_bytes(run.precision.compute)
    dp_overlap = compute.backward / mb if run.overlap.data_parallel else 0.0
    step_rows_from = len(comms.rows)
    if sh.stage <= 2:
        if sh.stage == 0:
            comms.add("data_parallel_all_reduce", "all_reduce", d, t * c, grads, 1.0, dp_overlap)
        else:
            comms.add("zero_reduce_scatter", "reduce_scatter", d, t * c, grads, 1.0, dp_overlap)
            comms.add("zero_all_gather", "all_gather", d, t * c, grads, 1.0, 0.0)
    else:
        # Prefetched all-gathers run under the forward and backward; the reduce-scatter is issued from the
        # post-backward hook on its own stream (PyTorch FSDP), under the rest of the backward.
        prefetched = compute.forward + compute.backward + compute.recompute if run.overlap.fsdp_prefetch else 0.0
        comms.add("fsdp_all_gather", "all_gather", group, t * c, grads, 2.0 * mb, prefetched)
        comms.add("fsdp_reduce_scatter", "reduce_scatter", group, t * c, grads, float(mb), compute.backward)
        comms.add("fsdp_replica_all_reduce", "all_reduce", d // group, t * c * group, grads / group, 1.0, dp_overlap)
    return sum(r.exposed_s for r in comms.rows[step_rows_from:])


def _optimizer_step_s(run: TrainingRun, params: float, cache: StepCache | None, edge: int | None) -> float:
    """The optimizer: memory-bound passes over this device's share of the parameters (`optimizer_passes`), at the
    band's `edge` when given."""
    sh = run.sharding
    shard = params / ((sh.shard_group or run.parallelism.data) if sh.stage >= 1 else 1)
    opt_s, opt_band = _optimizer_s(run, shard, cache)
    if edge is not None:
        opt_s *= opt_band[edge]
    return opt_s


def _pipeline_s(run: TrainingRun, compute: _Compute, per_mb_exposed: float) -> tuple[float, float]:
    """The micro-batches' compute and exposed collectives, and the pipeline's bubble on top: (p − 1)/(v·m) of them
    (Narayanan et al. 2021, §2.2)."""
    mb, p, v = run.micro_batches, run.parallelism.pipeline, run.parallelism.virtual_stages
    compute_mb = (compute.forward + compute.backward + compute.recompute) / mb
    ideal = mb * (compute_mb + per_mb_exposed)
    return ideal, ideal * (p - 1) / (v * mb)


def _flops(run: TrainingRun, layer: list[OpCost], head: list[OpCost], rows: list[OpRow]) -> tuple[float, float]:
    """The step's FLOPs over all devices: the model's (forward and backward) and the hardware's (recomputation too)."""
    par, mb = run.parallelism, run.micro_batches
    replicas = float(par.tensor * par.context * par.data)
    layer_fb = sum(o.share * (o.forward_flops + o.backward_flops) for o in layer)
    head_fb = sum((o.forward_flops + o.backward_flops) for o in head)
    model_flops = mb * replicas * (run.model.layers * layer_fb + head_fb)
    rc_flops = sum(r.cost.forward_flops * r.count for r in rows if r.recompute_s > 0) * par.pipeline * mb * replicas
    return model_flops, model_flops + rc_flops


def _largest_micro_batch(memory: TrainingMemory) -> int:
    """The most samples per micro-batch whose activations fit beside the step's static memory."""
    static = memory.total_bytes - memory.activations_bytes
    room = (memory.capacity_bytes - static) / memory.activations_per_sample_bytes
    return max(0, math.floor(room)) if math.isfinite(room) else 0
