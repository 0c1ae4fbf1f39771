"""Whole inference runs of a decoder-only transformer: prefill, every decode step, memory and communication.

A run is a model (`Transformer`), a device and its fabrics (`System`), a parallel layout (`Parallelism`), storage
types (`Precision`) and a workload (`Workload`). Each forward pass is built from the op core (`roofline.ops`), per
device, and every op of every run is evaluated at once: ops of one kind with the same static arguments on the same
device are concatenated into one vectorised call (`_Evaluator`), whichever run or decode step they belong to, so a
sweep of a thousand configurations costs a few dozen numpy calls.

The decode never loops in Python over tokens. Step t of a request with P prompt tokens attends to P + t keys;
everything else in a step depends only on how many sequences are active. The steps are evaluated as numpy arrays:
all of them when there are at most `InferenceRun.decode_samples`, otherwise that many evenly spaced steps (and
every step where the active batch changes), summed with the exact weights of the piecewise-linear interpolant
between them (`_linear_weights`). A step's time is affine in the context but for the attention kernel's block
quantization, so the sampled sum is within 1e-4 of the step-by-step one (tests/roofline/test_inference.py).

Collectives (tensor-parallel all-reduces, pipeline sends, expert all-to-alls) are timed by `roofline._collectives`
on the topology the service builds from the profile's fabrics.

Sources: kipply, "Transformer Inference Arithmetic" (2022) and Kaplan et al. 2020 for parameters, FLOPs and the KV
cache; Shoeybi et al. 2019 (Megatron-LM) for tensor parallelism; Huang et al. 2019 (GPipe) for the pipeline;
Shazeer et al. 2017 / Fedus et al. 2021 for mixture-of-experts routing; Shazeer 2019 (MQA) and Ainslie et al. 2023
(GQA); Pope et al. 2022, "Efficiently Scaling Transformer Inference", for the per-device memory and
communication of a partitioned decode.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from roofline._estimate import Array
from roofline._hardware import Hardware, dtype_bytes
from roofline._kernels import Kernel, single
from roofline.collectives import Topology, collective
from roofline.ops import activation, attention, elementwise, embedding, layernorm, matmul, rotary, softmax

IntArray = NDArray[np.int64]

# Rows of the per-op breakdown that are not kernels.
COMMUNICATION = "communication"
PIPELINE_BUBBLE = "pipeline_bubble"

# PyTorch's softmax keeps a row of at most 1024 elements in registers (one pass, online max and sum); longer rows go
# to its block softmax, which reads the input three times (aten/src/ATen/native/cuda/SoftMax.cu, host_softmax; the
# same rule bench/validate.py applies to LLMCompass's measured softmax).
ONLINE_SOFTMAX_MAX_COLS = 1024

FUSED_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu", "silu": "silu", "relu": "relu"}
GATED_ACTIVATION = {"gelu": "geglu", "gelu_tanh": "geglu", "silu": "swiglu"}


class InferenceConfigError(ValueError):
    """A run that cannot be built; `field` names the input at fault (e.g. `parallelism.tensor`)."""

    def __init__(self, field: str, message: str, index: int | None = None) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.index = index  # which run of `estimate_inferences`


# --- inputs ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Moe:
    """Mixture-of-experts FFN: `experts` routed experts of width `expert_ffn`, `top_k` per token, plus
    `shared_experts` every token uses; the first `dense_layers` layers have a dense FFN instead."""

    experts: int
    top_k: int
    expert_ffn: int
    shared_experts: int = 0
    dense_layers: int = 0


@dataclass(frozen=True)
class Mla:
    """DeepSeek's multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 §2.1): each token caches one latent of
    `kv_lora_rank` values and a shared rotary key of `rope_dim`; per-head keys (`nope_dim` + `rope_dim`) and values
    (`v_dim`) are projected up from it. Queries go through a `q_lora_rank` bottleneck when it is given."""

    kv_lora_rank: int
    rope_dim: int
    nope_dim: int
    v_dim: int
    q_lora_rank: int | None = None

    @property
    def latent(self) -> int:
        """Values cached per token and layer."""
        return self.kv_lora_rank + self.rope_dim


@dataclass(frozen=True)
class Transformer:
    """A decoder-only transformer's shape. `window` and `window_layers`: local attention over the last `window`
    tokens in that many layers (Mistral: all, Gemma 2: every other one)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    gated: bool
    activation: str
    vocab: int
    tied_embeddings: bool = True
    rms_norm: bool = False
    rotary: bool = False
    position_table: int = 0  # rows of a learned position-embedding table (0: none)
    bias: bool = False
    window: int | None = None
    window_layers: int = 0
    moe: Moe | None = None
    mla: Mla | None = None

    def with_kv_heads(self, kv_heads: int) -> Transformer:
        """The what-if of the same model with MHA (kv_heads = heads), MQA (1) or GQA (between)."""
        return replace(self, kv_heads=kv_heads)


@dataclass(frozen=True)
class Parallelism:
    """Megatron tensor parallelism inside a replica, GPipe pipeline stages, data-parallel replicas, and expert
    parallelism (experts spread over `expert` devices of the tensor × data group)."""

    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    expert: int = 1
    micro_batches: int | None = None  # default: min(batch, pipeline)

    @property
    def devices(self) -> int:
        return self.tensor * self.pipeline * self.data


@dataclass(frozen=True)
class Precision:
    """Storage types. Matmuls compute at the activation dtype's peak and read their weight operand at the weight
    dtype's size (weight-only quantisation dequantises in the kernel: W8A16, W4A16); W8A8 is weights and
    activations both fp8 or int8. Embedding and LM-head tables, norms and biases stay 16-bit when the weights
    are narrower, as quantised checkpoints keep them."""

    weights: str = "bf16"
    activations: str = "bf16"
    kv_cache: str = "bf16"

    @property
    def tables(self) -> str:
        return self.weights if dtype_bytes(self.weights) >= 2 else "bf16"


@dataclass(frozen=True)
class OpGroup:
    """Ops of one kind and settings on one device at many points, as the evaluator runs them: what a `Corrector`
    sees. `op` names the `roofline.ops` function (matmul, attention, softmax, layernorm, elementwise, activation,
    rotary, embedding) whose keyword arguments are `static` and `sizes` (1-D arrays of one length), or is
    "collective" (static: collective, devices, dtype; sizes: bytes, the per-device buffer as nccl-tests counts
    it). Times in seconds, per call."""

    op: str
    static: dict[str, Any]
    sizes: dict[str, Array]
    work_s: Array  # the model's time less its fixed costs (a collective has none)
    time_s: Array  # the model's time


@dataclass(frozen=True)
class Corrected:
    """A corrector's answer for an `OpGroup`: seconds per point, how each was made (`roofline.calibration.Method`:
    0 the model unchanged), and a label naming what corrected the group, carried to the breakdown's rows."""

    time_s: Array
    method: IntArray
    label: str


# Measured corrections of the model's op times (calibration: `roofline.calibration.apply` behind the service's
# lookup of which fitted correction covers an op family). Applied per op before anything is summed.
Corrector = Callable[[OpGroup], Corrected]


@dataclass(frozen=True)
class System:
    """Devices of one kind: the device, the collective topology a group of n of them uses (`roofline._collectives`:
    the service builds it from the profile's fabrics), the device's board power in watts, and an optional
    correction of every op's and collective's modelled time (`Corrector`)."""

    hardware: Hardware
    topology: Callable[[int], Topology] | None = None
    power_w: float | None = None
    correct: Corrector | None = None


@dataclass(frozen=True)
class Workload:
    """Requests decoded together by one replica: prompt and output tokens per kind of request (arrays of one
    length) and how many requests of each kind (`counts`, default one each). The prefill produces each request's
    first output token; each later token is one decode step."""

    prompt_tokens: IntArray
    output_tokens: IntArray
    counts: IntArray | None = None

    @staticmethod
    def uniform(batch: int, prompt_tokens: int, output_tokens: int) -> Workload:
        one = np.ones(1, dtype=np.int64)
        return Workload(one * prompt_tokens, one * output_tokens, one * batch)

    @property
    def weights(self) -> Array:
        out: Array = (np.ones(self.prompt_tokens.shape) if self.counts is None else self.counts).astype(np.float64)
        return out

    @property
    def batch(self) -> int:
        return int(self.weights.sum())


@dataclass(frozen=True)
class InferenceRun:
    model: Transformer
    system: System
    workload: Workload
    parallelism: Parallelism = field(default_factory=Parallelism)
    precision: Precision = field(default_factory=Precision)
    attention: str = "flash"  # or "naive": scores, softmax and values as three kernels (eager PyTorch)
    fused: bool = True  # bias, activation and residual in the matmul epilogues; rotary inside attention
    decode_samples: int = 2048  # decode steps evaluated one by one up to this many; sampled beyond


# --- outputs -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpRow:
    """One row of a phase's breakdown: an op summed over layers (and decode steps), on one device."""

    name: str
    calls: float  # kernels (or collectives) per forward pass
    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    overhead_s: float
    time_s: float
    raw_time_s: float | None = None  # the model's time before a correction (None: no corrector)
    # What corrected it: distinct (label, `roofline.calibration.Method`) over the points the row sums.
    corrections: tuple[tuple[str, int], ...] = ()

    @property
    def bound(self) -> str:
        if self.name == COMMUNICATION or self.name.endswith(("all_reduce", "all_to_all", "send")):
            return COMMUNICATION
        if self.name == PIPELINE_BUBBLE:
            return "idle"
        terms = {"compute": self.compute_s, "memory": self.memory_s, "overhead": self.overhead_s}
        return max(terms, key=lambda k: terms[k])


@dataclass(frozen=True)
class PhaseEstimate:
    time_s: float
    rows: list[OpRow]
    communication_s: dict[str, float]  # tensor_parallel, pipeline, expert
    raw_time_s: float | None = None  # before corrections (None: no corrector)


@dataclass(frozen=True)
class ParameterCount:
    """Parameter counts of the whole model (not per device)."""

    total: float
    embedding: float  # token (and position) tables and an untied LM head
    attention: float
    ffn: float  # dense FFNs, routed and shared experts, routers
    norms: float  # norm scales and shifts
    active_per_token: float  # what one token's forward pass uses (top-k experts)


@dataclass(frozen=True)
class MemoryUse:
    """Bytes on the busiest device."""

    weights_bytes: float
    kv_cache_bytes: float
    activation_bytes: float
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.activation_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


@dataclass(frozen=True)
class InferenceEstimate:
    parameters: ParameterCount
    memory: MemoryUse
    max_batch_that_fits: int
    prefill: PhaseEstimate
    decode: PhaseEstimate
    decode_steps: int
    decode_first_step_s: float | None
    decode_mean_step_s: float | None
    decode_last_step_s: float | None
    output_tokens: int  # per replica
    pipeline_bubble_fraction: float
    assumptions: dict[str, Any]

    @property
    def total_time_s(self) -> float:
        return self.prefill.time_s + self.decode.time_s

    @property
    def communication_s(self) -> float:
        return sum(self.prefill.communication_s.values()) + sum(self.decode.communication_s.values())


# --- parameters and memory ---------------------------------------------------------------------------------------


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
        moe_layers = m.layers - m.moe.dense_layers
        dense = m.moe.dense_layers * _ffn_params(m, m.ffn)
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


def _is_window_layer(m: Transformer, index: NDArray[np.int64]) -> NDArray[np.bool_]:
    if m.window is None or m.window_layers == 0:
        return np.zeros(index.shape, dtype=bool)
    if m.window_layers >= m.layers:
        return np.ones(index.shape, dtype=bool)
    # Gemma 2 alternates local and global layers, local first.
    out: NDArray[np.bool_] = index % 2 == 0
    return out


def _kv_heads_per_device(m: Transformer, t: int) -> float:
    """KV heads one device holds: split over the tensor-parallel group, replicated when there are fewer than t."""
    return max(1.0, m.kv_heads / t)


def _expert_shard(m: Transformer, par: Parallelism) -> float:
    """How many ways the routed experts' weights are split: over the tensor group, or over the expert group when
    it is larger (then each device holds E/expert whole experts)."""
    return float(max(par.tensor, par.expert))


@functools.lru_cache(maxsize=4096)
def weights_per_device(m: Transformer, par: Parallelism, prec: Precision) -> float:
    """Weight bytes on the busiest pipeline stage: its layers' matrices split over the tensor group (KV
    projections replicated when kv_heads < tensor), norms replicated, the vocabulary split over the tensor group
    (Megatron's vocabulary-parallel embedding), the input table on the first stage and the LM head on the last."""
    t, w, tab = par.tensor, dtype_bytes(prec.weights), dtype_bytes(prec.tables)
    d, hd = m.hidden, m.head_dim
    attn_matrices = (d * m.heads * hd * 2) / t + 2 * d * hd * _kv_heads_per_device(m, t)
    if m.mla is not None:
        replicated, split = _mla_params(m)
        attn_matrices = replicated + split / t
    attn_bias = ((m.heads + 2 * m.kv_heads) * hd / t + d) if m.bias else 0.0
    layer_fixed = attn_matrices * w + (attn_bias + 2 * _norm_params(m)) * tab
    dense_ffn = _ffn_params(m, m.ffn) / t * w
    if m.moe is not None:
        routed, shared, router = _moe_layer_params(m)
        moe_ffn = routed / _expert_shard(m, par) * w + shared / t * w + router * tab
    else:
        moe_ffn = dense_ffn
    dense_layers = m.moe.dense_layers if m.moe is not None else m.layers
    table = m.vocab * d / t * tab
    stages = _stages(m, par.pipeline)
    worst = 0.0
    for index, layers in enumerate(stages):
        n_dense = float(np.sum(layers < dense_layers))
        n_moe = float(layers.size) - n_dense
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
    per_token_layer = 2.0 * _kv_heads_per_device(m, par.tensor) * m.head_dim * dtype_bytes(prec.kv_cache)
    if m.mla is not None:  # one latent per token, held whole by every device of the tensor group
        per_token_layer = m.mla.latent * dtype_bytes(prec.kv_cache)
    worst = 0.0
    for layers in _stages(m, par.pipeline):
        local = _is_window_layer(m, layers)
        window = float(m.window) if m.window is not None else tokens
        held = float(np.sum(np.where(local, min(tokens, window), tokens)))
        worst = max(worst, held * per_token_layer)
    return worst


def _activation_bytes_per_sequence(
    m: Transformer, par: Parallelism, prec: Precision, prompt: float, naive: bool
) -> float:
    """Peak transient bytes per sequence of a prefill micro-batch: the residual stream, the widest intermediate one
    kernel writes (QKV, the FFN's up projection or, for eager attention, the score matrix) and fp32 logits."""
    t = par.tensor
    h_dev, kvh_dev = m.heads / t, _kv_heads_per_device(m, t)
    g = 2 if m.gated else 1
    widths = [(h_dev + 2 * kvh_dev) * m.head_dim, g * m.ffn / t]
    if m.mla is not None:
        widths.append(h_dev * (m.mla.nope_dim + max(m.mla.rope_dim, m.mla.v_dim)))
    if m.moe is not None:
        widths.append(g * (m.moe.top_k + m.moe.shared_experts) * m.moe.expert_ffn / t)
    widest = max(widths) * prompt
    if naive:
        keys = min(prompt, m.window) if m.window is not None and m.window_layers >= m.layers else prompt
        widest = max(widest, h_dev * prompt * keys)
    return (prompt * m.hidden + widest) * dtype_bytes(prec.activations) + m.vocab / t * 4.0


# --- evaluation --------------------------------------------------------------------------------------------------

_OPS: dict[str, Callable[..., list[Kernel]]] = {
    "matmul": matmul,
    "attention": attention,
    "softmax": softmax,
    "layernorm": layernorm,
    "elementwise": elementwise,
    "activation": activation,
    "rotary": rotary,
    "embedding": embedding,
}
_TERMS = ("flops", "bytes", "compute_s", "memory_s", "overhead_s", "time_s", "raw_time_s")
TIME, RAW_TIME = 5, 6  # rows of a result: the (corrected) time, and the model's own


class _Call:
    """One op of a forward pass at `points` points (1-D `sizes`); `index` maps the phase's samples to the points.
    Calls with equal `key` are evaluated together."""

    __slots__ = (
        "adjust", "correct", "hw", "index", "key", "label", "method", "op", "points", "result", "sizes", "static",
        "vector_dtype",
    )  # fmt: skip

    def __init__(
        self,
        hw: Hardware,
        op: str,
        static: tuple[tuple[str, Any], ...],
        sizes: dict[str, Array],
        index: IntArray,
        vector_dtype: str,
        adjust: tuple[tuple[str, float], ...] = (),
        correct: Corrector | None = None,
    ) -> None:
        self.hw, self.op, self.static, self.sizes, self.index = hw, op, static, sizes, index
        self.vector_dtype, self.adjust, self.correct = vector_dtype, adjust, correct
        self.points = len(next(iter(sizes.values())))
        self.key = (id(hw), op, static, adjust, vector_dtype, tuple(sizes), id(correct))
        self.result: Array = _NO_RESULT  # _TERMS × points, once evaluated
        self.method: IntArray = _NO_METHOD  # per point, once evaluated: how a corrector made its time (0: none)
        self.label = ""


_NO_RESULT: Array = np.zeros((len(_TERMS), 0))
_NO_METHOD: IntArray = np.zeros(0, dtype=np.int64)


def _apply(kernels: list[Kernel], adjust: tuple[tuple[str, float], ...]) -> None:
    """Storage types the op functions take as one dtype: a matmul's weight operand (B) read at the weight or KV
    dtype, flash attention's K/V at the KV dtype, a gated epilogue writing half of its product's columns."""
    main = kernels[0]
    for what, factor in adjust:
        if what == "b_operand":
            main.external_in_bytes = main.external_in_bytes + main.extra["b_bytes"] * (factor - 1.0)
        elif what == "external":
            main.external_in_bytes = main.external_in_bytes * factor
        elif what == "out":
            main.out_bytes = main.out_bytes * factor
        else:  # pragma: no cover - internal
            raise ValueError(f"unknown adjustment {what!r}")


@dataclass
class _Collective:
    """One collective at `message_bytes` (1-D) among `devices` devices of a system."""

    topology: Callable[[int], Topology]
    op: str
    devices: int
    message_bytes: Array
    owner: int
    dtype: str = "bf16"
    correct: Corrector | None = None
    time_s: Array = field(default_factory=lambda: np.zeros(0))  # corrected, when there is a corrector
    raw_time_s: Array = field(default_factory=lambda: np.zeros(0))
    method: IntArray = field(default_factory=lambda: _NO_METHOD)
    label: str = ""

    def seconds(self, term: int) -> Array:
        return self.time_s if term == TIME else self.raw_time_s


class _Evaluator:
    """Collects the ops of many passes and evaluates each group of alike ops in one vectorised call."""

    def __init__(self) -> None:
        self.calls: list[_Call] = []
        self.collective_calls: list[_Collective] = []
        self.owner = 0  # the run whose ops are being added

    def add(self, call: _Call) -> _Call:
        self.calls.append(call)
        return call

    def collective(
        self, system: System, op: str, devices: int, message_bytes: Array, dtype: str = "bf16"
    ) -> _Collective:
        if system.topology is None:
            raise InferenceConfigError(
                "hardware", f"{system.hardware.name} has no interconnect for a {devices}-device {op}"
            )
        call = _Collective(system.topology, op, devices, message_bytes, self.owner, dtype, system.correct)
        self.collective_calls.append(call)
        return call

    def run(self) -> None:
        coll_groups: dict[tuple[Any, ...], list[_Collective]] = {}
        for coll in self.collective_calls:
            key = (id(coll.topology), coll.op, coll.devices, coll.dtype, id(coll.correct))
            coll_groups.setdefault(key, []).append(coll)
        for colls in coll_groups.values():
            head = colls[0]
            try:
                # A send_recv over a group's topology is between neighbours: across nodes when the group spans them.
                topology = head.topology(head.devices)
                messages = np.concatenate([c.message_bytes for c in colls])
                raw = np.asarray(collective(head.op, messages, topology).time_s, dtype=np.float64)
            except ValueError as err:
                field_ = {"all_reduce": "parallelism.tensor", "all_to_all": "parallelism.expert"}.get(
                    head.op, "parallelism.pipeline"
                )
                message = err.message if isinstance(err, InferenceConfigError) else str(err)
                raise InferenceConfigError(field_, message, min(c.owner for c in colls)) from None
            raw = np.broadcast_to(raw, messages.shape)
            seconds, method, label = raw, np.zeros(raw.shape, dtype=np.int64), ""
            if head.correct is not None:
                static = {"collective": head.op, "devices": head.devices, "dtype": head.dtype}
                fixed = head.correct(OpGroup("collective", static, {"bytes": messages}, raw, raw))
                seconds, method, label = fixed.time_s, fixed.method, fixed.label
            offset = 0
            for coll in colls:
                part = slice(offset, offset + coll.message_bytes.size)
                coll.time_s, coll.raw_time_s, coll.method = seconds[part], raw[part], method[part]
                coll.label = label
                offset += coll.message_bytes.size
        self.collective_calls = []
        groups: dict[tuple[Any, ...], list[_Call]] = {}
        for call in self.calls:
            groups.setdefault(call.key, []).append(call)
        for calls in groups.values():
            first = calls[0]
            sizes = {name: np.concatenate([c.sizes[name] for c in calls]) for name in first.sizes}
            kernels = _OPS[first.op](first.hw, **sizes, **dict(first.static))
            _apply(kernels, first.adjust)
            est = single(kernels, first.hw, first.hw.vector_peak(first.vector_dtype), first.hw.launch_s)
            terms = (est.flops, est.bytes, est.compute_s, est.memory_s, est.overhead_s, est.time_s, est.time_s)
            values = np.stack(terms).astype(np.float64)
            how, label = np.zeros(values.shape[1], dtype=np.int64), ""
            if first.correct is not None:
                work = values[TIME] - values[4]
                fixed = first.correct(OpGroup(first.op, dict(first.static), sizes, work, values[RAW_TIME].copy()))
                values[TIME], how, label = fixed.time_s, fixed.method, fixed.label
            start = 0
            for c in calls:
                stop = start + c.points
                c.result, c.method, c.label = values[:, start:stop], how[start:stop], label
                start = stop
        self.calls = []


def _linear_weights(samples: IntArray) -> Array:
    """Weights w such that Σ w·f(samples) = Σ_{j = first … last} f̂(j), f̂ the piecewise-linear interpolant of f
    between consecutive samples. Between samples a < b (n = b − a) the steps a … b − 1 contribute (n + 1)/2 of
    f(a) and (n − 1)/2 of f(b); the last sample adds itself once. All ones when every step is a sample."""
    w = np.zeros(samples.size)
    gaps = np.diff(samples).astype(np.float64)
    w[:-1] += (gaps + 1.0) / 2.0
    w[1:] += (gaps - 1.0) / 2.0
    w[-1] += 1.0
    return w


@dataclass
class _Entry:
    call: _Call
    count: float  # kernels of this kind per forward pass (layers)
    point_weight: Array | None = None  # per point of the call: a share of the pass that uses it (0 or 1)


@dataclass
class _Pass:
    """The ops of forward passes at K sample points (prefill: one; decode: the sampled steps), on one device.

    A call's results map to samples through its `index`; in the prefill (`sum_points`), attention has one point
    per distinct prompt length and its points are summed."""

    samples: int
    sum_points: bool = False
    rows: dict[str, list[_Entry]] = field(default_factory=dict)
    comm: dict[str, tuple[_Collective, IntArray, float]] = field(default_factory=dict)  # name → (op, index, calls)

    def add(self, name: str, call: _Call, count: float, point_weight: Array | None = None) -> None:
        if count > 0:
            self.rows.setdefault(name, []).append(_Entry(call, count, point_weight))

    def totals(self) -> dict[str, tuple[Array, float]]:
        """Per row: its `_TERMS` per forward pass at each sample (a _TERMS × samples matrix) and its calls per pass."""
        out: dict[str, tuple[Array, float]] = {}
        for name, entries in self.rows.items():
            acc = np.zeros((len(_TERMS), self.samples))
            calls = 0.0
            for e in entries:
                values = e.call.result if e.point_weight is None else e.call.result * e.point_weight
                if self.sum_points and e.call.index.size == 0:
                    acc += e.count * values.sum(axis=1, keepdims=True)
                else:
                    acc += e.count * values[:, e.call.index]
                calls += e.count
            out[name] = (acc, calls)
        for name, (coll, index, calls) in self.comm.items():
            acc = np.zeros((len(_TERMS), self.samples))
            acc[1], acc[TIME] = calls * coll.message_bytes[index], calls * coll.time_s[index]
            acc[RAW_TIME] = calls * coll.raw_time_s[index]
            out[name] = (acc, calls)
        return out

    def corrections(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """Per row: the distinct (label, method) of the corrections at the points it sums (empty: no corrector)."""
        out: dict[str, set[tuple[str, int]]] = {}
        for name, entries in self.rows.items():
            for e in entries:
                if e.call.correct is None:
                    continue
                used = e.call.method if self.sum_points and e.call.index.size == 0 else e.call.method[e.call.index]
                out.setdefault(name, set()).update((e.call.label, int(m)) for m in np.unique(used))
        for name, (coll, index, _) in self.comm.items():
            if coll.correct is not None:
                out.setdefault(name, set()).update((coll.label, int(m)) for m in np.unique(coll.method[index]))
        return {name: tuple(sorted(pairs)) for name, pairs in out.items()}


class _RunPlan:
    """One run: validates it, registers its ops with the evaluator, and assembles the estimate afterwards."""

    def __init__(self, run: InferenceRun, ev: _Evaluator) -> None:
        validate_inference(run)
        self.run, self.ev = run, ev
        self.hidden_bytes = run.model.hidden * dtype_bytes(run.precision.activations)
        self.hw = run.system.hardware
        self.wl = run.workload
        self.batch = self.wl.batch
        p = run.parallelism.pipeline
        self.micro = run.parallelism.micro_batches or min(self.batch, p)
        prompts = self.wl.prompt_tokens.astype(np.float64)
        outputs = self.wl.output_tokens.astype(np.int64)
        weights = self.wl.weights
        self.prompt_total = float(prompts @ weights)

        # Prefill: every prompt, in `micro` micro-batches; the LM head runs on each sequence's last position.
        self.prefill = _Pass(1, sum_points=True)
        b_m = self.batch / self.micro
        unique_p, which = np.unique(prompts, return_inverse=True)
        counts = np.bincount(which.reshape(-1), weights=weights)
        span = run.parallelism.tensor * p
        self.prefill_send = (
            self.ev.collective(
                run.system,
                "send_recv",
                span,
                np.array([self.prompt_total / self.micro]) * self.hidden_bytes,
                run.precision.activations,
            )
            if p > 1
            else None
        )
        self._build(
            self.prefill, tokens=np.array([self.prompt_total / self.micro]),
            attn=(counts / self.micro, unique_p, unique_p), sequences=np.array([b_m]), prefill=True,
        )  # fmt: skip

        # Decode: steps j = 1 … S (S = longest output − 1); request i is active while j ≤ o_i − 1 and its new token
        # attends to its p_i + j cached keys (itself included).
        self.steps = int(outputs.max()) - 1
        self.samples = self._samples(outputs) if self.steps > 0 else np.zeros(0, dtype=np.int64)
        self.decode = _Pass(self.samples.size)
        if self.steps > 0:
            # Requests still decoding at each sampled step and the sum of their contexts, from cumulative sums over
            # the kinds of request ordered by their last step (no steps × kinds matrix).
            ends = outputs - 1
            order = np.argsort(ends, kind="stable")
            cum_w = np.concatenate([[0.0], np.cumsum(weights[order])])
            cum_wp = np.concatenate([[0.0], np.cumsum((weights * prompts)[order])])
            done = np.searchsorted(ends[order], self.samples, side="left")  # kinds whose last step is earlier
            self.active = cum_w[-1] - cum_w[done]
            contexts = cum_wp[-1] - cum_wp[done] + self.samples * self.active
            self.micro_k = np.minimum(float(self.micro), self.active)
            b_k = self.active / self.micro_k
            self.weights = _linear_weights(self.samples)
            self.step_bytes = b_k * self.hidden_bytes
            if p > 1:
                self.decode_send = self.ev.collective(
                    run.system, "send_recv", span, self.step_bytes, run.precision.activations
                )
            self._build(
                self.decode, tokens=b_k, attn=(b_k, np.ones_like(b_k), contexts / self.active), sequences=b_k,
                prefill=False,
            )  # fmt: skip

    def _samples(self, outputs: IntArray) -> IntArray:
        if self.steps <= self.run.decode_samples:
            return np.arange(1, self.steps + 1, dtype=np.int64)
        grid = np.rint(np.linspace(1, self.steps, self.run.decode_samples)).astype(np.int64)
        # Steps where the active batch changes are kept with their neighbours: no interpolation straddles one.
        ends = outputs - 1
        breaks = np.concatenate([ends, ends + 1])
        breaks = breaks[(breaks >= 1) & (breaks <= self.steps)]
        out: IntArray = np.unique(np.concatenate([grid, breaks]))
        return out

    def _call(
        self, op: str, sizes: dict[str, Array], static: dict[str, Any], index: IntArray,
        adjust: tuple[tuple[str, float], ...] = (),
    ) -> _Call:  # fmt: skip
        items = tuple(sorted(static.items()))
        correct = self.run.system.correct
        return self.ev.add(_Call(self.hw, op, items, sizes, index, self.run.precision.activations, adjust, correct))

    def _build(
        self, ps: _Pass, tokens: Array, attn: tuple[Array, Array, Array], sequences: Array, prefill: bool
    ) -> None:
        """Register the ops of one forward pass through every layer, per device and per micro-batch.

        `tokens` (new tokens in the micro-batch) and `sequences` are arrays over the samples; `attn` is
        (sequences, query length, keys) per attention point (one per sample in the decode; one per distinct prompt
        length in the prefill)."""
        run, m, par, prec = self.run, self.run.model, self.run.parallelism, self.run.precision
        t, fused = par.tensor, run.fused
        act = prec.activations
        s_act = dtype_bytes(act)
        w_factor = dtype_bytes(prec.weights) / s_act
        table_factor = dtype_bytes(prec.tables) / s_act
        kv_factor = dtype_bytes(prec.kv_cache) / s_act
        d, hd = float(m.hidden), float(m.head_dim)
        h_dev, kvh_dev = m.heads / t, _kv_heads_per_device(m, t)
        g = 2.0 if m.gated else 1.0
        layers = float(m.layers)
        bias = ("bias",) if m.bias else ()

        # Everything but attention depends only on the tokens in the pass: evaluated once per distinct count.
        tok, inv = _unique(tokens)

        def linear(
            name: str, n: Array | float, k: Array | float, count: float, epilogue: tuple[str, ...] = (),
            out: float = 1.0, rows: Array | None = None, batch: Array | float = 1.0, weight: float | None = None,
            index: IntArray | None = None,
        ) -> None:  # fmt: skip
            """y = x·W: a matmul whose B operand (the weights) is read at the weight dtype's size."""
            mm = tok if rows is None else rows
            sizes = {
                name_: _full(value, mm.shape) for name_, value in (("m", mm), ("n", n), ("k", k), ("batch", batch))
            }
            adjust: tuple[tuple[str, float], ...] = (("b_operand", w_factor if weight is None else weight),)
            if out != 1.0:
                adjust = (*adjust, ("out", out))
            epi = tuple(e for e in epilogue if fused or e == "bias")  # eager linear layers add their bias (addmm)
            static = {"dtype": act, "epilogue": epi, "fuse_epilogue": True}
            ps.add(name, self._call("matmul", sizes, static, inv if index is None else index, adjust), count)

        def vector(name: str, op: str, count: float, static: dict[str, Any], **sizes: Array | float) -> None:
            shaped = {k: _full(v, tok.shape) for k, v in sizes.items()}
            ps.add(name, self._call(op, shaped, {"dtype": act, **static}, inv), count)

        def norm(name: str, count: float, rows: Array = tok, index: IntArray = inv, cols: float = d) -> None:
            sizes = {"rows": rows, "cols": _full(cols, rows.shape)}
            ps.add(name, self._call("layernorm", sizes, {"dtype": act, "rms": m.rms_norm}, index), count)

        def activation_(name: str, elements: Array, count: float) -> None:
            if fused:  # the up projection's epilogue
                return
            if m.gated and m.activation not in GATED_ACTIVATION:  # ReGLU: relu(gate) · up
                vector(
                    name, "elementwise", count, {"inputs": 2, "outputs": 1, "flops_per_element": 2.0}, elements=elements
                )
            else:
                fn = GATED_ACTIVATION[m.activation] if m.gated else m.activation
                vector(name, "activation", count, {"function": fn}, elements=elements)

        # Fused, the up projection's epilogue applies the activation; a gated pair writes act(gate)·up, half of
        # the product's columns.
        up_epilogue = (*bias, FUSED_ACTIVATION[m.activation])
        up_out = 0.5 if m.gated and fused else 1.0

        window = _is_window_layer(m, np.arange(m.layers))
        n_local = float(window.sum())
        n_moe = float(m.layers - m.moe.dense_layers) if m.moe is not None else 0.0
        n_dense = layers - n_moe

        # Embedding lookup: each device gathers the rows of its vocabulary slice (Megatron), all-reduced with the
        # first all-reduce; modelled as one gather of every token's row.
        embed = {"tokens": tok, "hidden": _full(d, tok.shape), "vocab": _full(m.vocab / t, tok.shape)}
        ps.add("embedding", self._call("embedding", embed, {"dtype": prec.tables}, inv), 1.0)

        a_seq, a_q, a_kv = attn
        a_index = np.zeros(0, dtype=np.int64) if prefill else np.arange(a_seq.size, dtype=np.int64)

        def attend(
            heads: float, kv_heads: float, qk_dim: float, v_dim: float, kv_read: float, flash_read: float
        ) -> None:
            """Attention of `heads` query heads over `kv_heads` K/V heads (keys of qk_dim, values of v_dim), in
            global and windowed layers. K and V are read at `kv_read` times the activation size (eager: the B
            operands) or `flash_read` times what the flash kernel's K and V would be (a latent read once for both)."""
            for count, local in ((layers - n_local, False), (n_local, True)):
                if count == 0:
                    continue
                kv = np.minimum(a_kv, float(m.window)) if local and m.window is not None else a_kv
                # A prompt longer than the window: each query sees a band of `window` keys. A non-causal q × window
                # block has the band's pairs and reads K/V as a banded flash kernel does (the first window's
                # triangle is counted in full: at most window / 2q over).
                causal = not bool(np.any(kv < a_q))
                if run.attention == "flash":
                    # One head dimension for both products: (qk + v)/2 gives their FLOPs and K + V bytes exactly.
                    sizes = {
                        "batch": a_seq, "heads": _full(heads, a_seq.shape), "kv_heads": _full(kv_heads, a_seq.shape),
                        "head_dim": _full((qk_dim + v_dim) / 2, a_seq.shape), "q_len": a_q, "kv_len": kv,
                    }  # fmt: skip
                    static = {"dtype": act, "causal": causal, "implementation": "flash"}
                    call = self._call("attention", sizes, static, a_index, (("external", flash_read),))
                    ps.add("attention", call, count)
                    continue
                # Eager attention (PyTorch without a fused kernel; seed 004's calculator): S = Q·Kᵀ per KV head for
                # its group of query heads, softmax, O = S·V, three kernels through device memory; K and V are the
                # B operands.
                mm = {"m": heads / kv_heads * a_q, "batch": a_seq * kv_heads}
                static = {"dtype": act, "epilogue": (), "fuse_epilogue": True}
                adjust = (("b_operand", kv_read),)
                scores = self._call("matmul", {**mm, "n": kv, "k": _full(qk_dim, kv.shape)}, static, a_index, adjust)
                ps.add("attention_scores", scores, count)
                rows = a_seq * heads * a_q
                for online in (True, False):
                    share = (kv <= ONLINE_SOFTMAX_MAX_COLS) == online
                    if np.any(share):
                        sm = self._call(
                            "softmax", {"rows": rows, "cols": kv}, {"dtype": act, "online": online}, a_index
                        )
                        ps.add("softmax", sm, count, share.astype(np.float64))
                values = self._call("matmul", {**mm, "n": _full(v_dim, kv.shape), "k": kv}, static, a_index, adjust)
                ps.add("attention_values", values, count)

        norm("attention_norm", layers)
        if m.mla is None:
            # QKV (heads split over the tensor group), rotary, attention.
            linear("qkv_projection", (h_dev + 2 * kvh_dev) * hd, d, layers, bias)
            if m.rotary and not fused:  # fused: applied inside the attention kernel (its FLOPs are negligible)
                vector("rotary", "rotary", layers, {}, tokens=tok, heads=h_dev + kvh_dev, head_dim=hd)
            attend(h_dev, kvh_dev, hd, hd, kv_factor, kv_factor)
            attention_out = h_dev * hd
        else:
            # Multi-head latent attention (DeepSeek-V2 §2.1): down projections to the query bottleneck and to the
            # cached latent (replicated over the tensor group), then, in the prefill, the latent is projected up to
            # per-head keys and values and attended as MHA; in the decode the up projections are absorbed (DeepSeek-V2
            # §2.1.2; FlashMLA): queries move into the latent space, attention runs over the latent as MQA (the
            # latent read once as keys and values), and the result moves back to per-head values.
            a = m.mla
            qk = float(a.nope_dim + a.rope_dim)
            if a.q_lora_rank:
                linear("q_down_projection", float(a.q_lora_rank), d, layers)
                norm("q_norm", layers, cols=float(a.q_lora_rank))
            linear("q_up_projection", h_dev * qk, float(a.q_lora_rank or d), layers)
            linear("kv_down_projection", float(a.latent), d, layers)
            norm("kv_norm", layers, cols=float(a.kv_lora_rank))
            if m.rotary and not fused:
                vector("rotary", "rotary", layers, {}, tokens=tok, heads=h_dev + 1.0, head_dim=float(a.rope_dim))
            if prefill:
                linear("kv_up_projection", h_dev * (a.nope_dim + a.v_dim), float(a.kv_lora_rank), layers)
                attend(h_dev, h_dev, qk, float(a.v_dim), 1.0, 1.0)
            else:
                linear("q_absorb", float(a.kv_lora_rank), float(a.nope_dim), layers, batch=h_dev)
                latent, lora = float(a.latent), float(a.kv_lora_rank)
                attend(h_dev, 1.0, latent, lora, kv_factor, kv_factor * latent / (latent + lora))
                linear("v_absorb", float(a.v_dim), lora, layers, batch=h_dev)
            attention_out = h_dev * a.v_dim
        linear("output_projection", d, attention_out, layers, (*bias, "residual"))
        if not fused:
            vector(
                "residual_add",
                "elementwise",
                layers,
                {"inputs": 2, "outputs": 1, "flops_per_element": 1.0},
                elements=tok * d,
            )

        # Megatron: one all-reduce of the block's output after attention and one after the FFN.
        if t > 1:
            coll = self.ev.collective(run.system, "all_reduce", t, tok * d * s_act, act)
            ps.comm["tensor_parallel_all_reduce"] = (coll, inv, 2.0 * layers)

        # FFN block.
        norm("ffn_norm", layers)
        if n_dense > 0:
            width = m.ffn / t
            linear("ffn_up", g * width, d, n_dense, up_epilogue, up_out)
            activation_("activation", tok * width, n_dense)
            linear("ffn_down", d, width, n_dense, (*bias, "residual"))
            if not fused:
                vector(
                    "residual_add",
                    "elementwise",
                    n_dense,
                    {"inputs": 2, "outputs": 1, "flops_per_element": 1.0},
                    elements=tok * d,
                )
        if m.moe is not None and n_moe > 0:
            e, ep = m.moe, float(par.expert)
            # The expert group routes the tokens of its tensor group, or of ep/t replicas when it is wider; each
            # device holds E/ep experts, each split over t/ep devices when ep < t (`_expert_shard`).
            width = e.expert_ffn * ep / _expert_shard(m, par)
            group_tokens = tok * max(1.0, ep / t)
            touched = touched_experts(e.experts, e.top_k, group_tokens) / ep  # on this device
            pairs = group_tokens * e.top_k / ep  # token-expert pairs this device computes
            per_expert = pairs / touched
            linear("router", float(e.experts), d, n_moe, weight=table_factor)
            linear("experts_up", g * width, d, n_moe, up_epilogue, up_out, rows=per_expert, batch=touched)
            activation_("experts_activation", pairs * width, n_moe)
            linear("experts_down", d, width, n_moe, rows=per_expert, batch=touched)
            inputs = e.top_k + 1.0  # the k expert outputs and the residual, weighted and summed
            if e.shared_experts:
                shared = e.shared_experts * e.expert_ffn / t
                linear("shared_experts_up", g * shared, d, n_moe, up_epilogue, up_out)
                activation_("shared_experts_activation", tok * shared, n_moe)
                linear("shared_experts_down", d, shared, n_moe)
                inputs += 1.0
            static = {"inputs": inputs, "outputs": 1, "flops_per_element": 2.0 * inputs}
            vector("experts_combine", "elementwise", n_moe, static, elements=tok * d)
            if ep > t:
                # Dispatch and combine: each device sends its share of the tokens' k copies (Lepikhin et al. 2020).
                coll = self.ev.collective(run.system, "all_to_all", par.expert, tok * e.top_k * d * s_act / t, act)
                ps.comm["expert_all_to_all"] = (coll, inv, 2.0 * n_moe)

        # Final norm and the LM head on each sequence's last position (vocabulary split over the tensor group).
        rows, index = _unique(sequences)
        norm("final_norm", 1.0, rows, index)
        linear("lm_head", m.vocab / t, d, 1.0, rows=rows, weight=table_factor, index=index)

    # -- assembling --

    def assemble(self) -> InferenceEstimate:
        m, par = self.run.model, self.run.parallelism
        p, mb = par.pipeline, float(self.micro)
        corrected = self.run.system.correct is not None

        # Prefill (GPipe): m micro-batches through p stages take (m + p − 1) stage times τ plus p − 1 sends.
        pre = self.prefill.totals()
        send_bytes = np.array([self.prompt_total / mb]) * self.hidden_bytes

        def prefill_timeline(term: int) -> tuple[float, float, float]:
            """(phase time, pipeline sends, bubble) from the op times of row `term` of the results."""
            tau = _pass_time(pre, term) / p
            send = self.prefill_send.seconds(term) if self.prefill_send is not None else np.zeros(1)
            return float(((mb + p - 1) * tau + (p - 1) * send)[0]), float((p - 1) * send[0]), float((p - 1) * tau[0])

        prefill_time, pre_send, pre_idle = prefill_timeline(TIME)
        raw_pre = prefill_timeline(RAW_TIME) if corrected else None
        prefill_rows = _rows(pre, np.array([mb / p]), np.ones(1), self.prefill.corrections(), corrected)
        comm_pre = _comm(pre, np.array([mb / p]), np.ones(1))
        if p > 1:
            comm_pre["pipeline"] = pre_send
            raw_send, raw_idle = (raw_pre[1], raw_pre[2]) if raw_pre else (None, None)
            prefill_rows.append(_row("pipeline_send", p - 1.0, float((p - 1) * send_bytes[0]), pre_send, raw_send))
            prefill_rows.append(_row(PIPELINE_BUBBLE, 0.0, 0.0, pre_idle, raw_idle))

        # Decode: every step advances each sequence once. m micro-batches keep the stages busy (m·τ) unless one
        # micro-batch's round trip through the p stages is longer (p·(τ + send)).
        first = mean = last = None
        decode_rows: list[OpRow] = []
        comm_dec = {"tensor_parallel": 0.0, "pipeline": 0.0, "expert": 0.0}
        decode_time = 0.0
        raw_decode: float | None = 0.0 if corrected else None
        if self.steps > 0:
            dec = self.decode.totals()
            mk, w = self.micro_k, self.weights

            def decode_timeline(term: int) -> tuple[Array, float, float]:
                """(time of each sampled step, pipeline sends, bubble) from the op times of row `term`."""
                tau_k = _pass_time(dec, term) / p
                step_send = self.decode_send.seconds(term) if p > 1 else np.zeros_like(tau_k)
                step = np.maximum(mk * tau_k, p * (tau_k + step_send))
                idle = np.maximum(0.0, p - mk) * tau_k
                return step, float(w @ (step - mk * tau_k - idle)), float(w @ idle)

            step, dec_send, dec_idle = decode_timeline(TIME)
            raw_dec = decode_timeline(RAW_TIME) if corrected else None
            decode_time = float(w @ step)
            raw_decode = float(w @ raw_dec[0]) if raw_dec else None
            first, last, mean = float(step[0]), float(step[-1]), decode_time / self.steps
            decode_rows = _rows(dec, mk / p, w, self.decode.corrections(), corrected)
            comm_dec = _comm(dec, mk / p, w)
            if p > 1:
                comm_dec["pipeline"] = dec_send
                raw_send, raw_idle = (raw_dec[1], raw_dec[2]) if raw_dec else (None, None)
                send_total = float(w @ (p * self.step_bytes))
                decode_rows.append(_row("pipeline_send", float(p), send_total, dec_send, raw_send))
                decode_rows.append(_row(PIPELINE_BUBBLE, 0.0, 0.0, dec_idle, raw_idle))

        return InferenceEstimate(
            parameters=parameter_count(m),
            memory=self.memory(),
            max_batch_that_fits=self.max_batch(),
            prefill=PhaseEstimate(prefill_time, prefill_rows, comm_pre, raw_pre[0] if raw_pre else None),
            decode=PhaseEstimate(decode_time, decode_rows, comm_dec, raw_decode),
            decode_steps=self.steps,
            decode_first_step_s=first,
            decode_mean_step_s=mean,
            decode_last_step_s=last,
            output_tokens=int(self.wl.output_tokens @ self.wl.weights),
            pipeline_bubble_fraction=(p - 1) / (mb + p - 1),
            assumptions={
                "micro_batches": self.micro,
                "decode_steps_evaluated": int(self.samples.size),
                "collectives": "roofline._collectives, fastest algorithm per message (auto)",
            },
        )

    def memory(self) -> MemoryUse:
        run, m, par, prec = self.run, self.run.model, self.run.parallelism, self.run.precision
        # The last output token is sampled, never fed back: a request holds p + o − 1 tokens of K and V at most.
        w = self.wl.weights
        contexts = self.wl.prompt_tokens + self.wl.output_tokens - 1
        kv = sum(kv_bytes_per_sequence(m, par, prec, float(c)) * n for c, n in zip(contexts, w, strict=True))
        naive = run.attention == "naive"
        act = (
            sum(
                _activation_bytes_per_sequence(m, par, prec, float(pt), naive) * n
                for pt, n in zip(self.wl.prompt_tokens, w, strict=True)
            )
            / self.micro
        )
        return MemoryUse(
            weights_per_device(m, par, prec), float(kv), float(act), run.system.hardware.memory_capacity_bytes
        )

    def max_batch(self) -> int:
        """The largest batch of requests shaped like the longest one that fits: the capacity left by the weights
        over one sequence's KV cache and prefill activations (both linear in the batch)."""
        run, m, par, prec = self.run, self.run.model, self.run.parallelism, self.run.precision
        context = float((self.wl.prompt_tokens + self.wl.output_tokens - 1).max())
        prompt = float(self.wl.prompt_tokens.max())
        micro = float(par.micro_batches or par.pipeline)
        naive = run.attention == "naive"
        per_sequence = kv_bytes_per_sequence(m, par, prec, context)
        per_sequence += _activation_bytes_per_sequence(m, par, prec, prompt, naive) / micro
        free = run.system.hardware.memory_capacity_bytes - weights_per_device(m, par, prec)
        return max(0, math.floor(free / per_sequence))


def _pass_time(totals: dict[str, tuple[Array, float]], term: int = TIME) -> Array:
    out: Array = np.sum([values[term] for values, _ in totals.values()], axis=0)
    return out


def _unique(values: Array) -> tuple[Array, IntArray]:
    uniq, inv = np.unique(values, return_inverse=True)
    return uniq.astype(np.float64), inv.astype(np.int64).reshape(-1)


def _full(value: Array | float, shape: tuple[int, ...]) -> Array:
    if isinstance(value, np.ndarray) and value.shape == shape:
        return value
    out: Array = np.empty(shape)
    out[...] = value
    return out


def _row(name: str, calls: float, bytes_: float, time_s: float, raw_time_s: float | None = None) -> OpRow:
    return OpRow(name, calls, 0.0, bytes_, 0.0, 0.0, 0.0, time_s, raw_time_s)


def _rows(
    totals: dict[str, tuple[Array, float]],
    scale: Array,
    weights: Array,
    corrections: dict[str, tuple[tuple[str, int], ...]],
    corrected: bool,
) -> list[OpRow]:
    """Rows of a phase: per-pass figures at each sample, times the passes a device runs per sample (`scale`),
    summed over the samples with their weights."""
    rows = []
    for name, (values, calls) in totals.items():
        flops, bytes_, compute, memory, overhead, time, raw = ((values * scale) @ weights).tolist()
        how = corrections.get(name, ())
        rows.append(OpRow(name, calls, flops, bytes_, compute, memory, overhead, time, raw if corrected else None, how))
    return rows


def _comm(totals: dict[str, tuple[Array, float]], scale: Array, weights: Array) -> dict[str, float]:
    out = {"tensor_parallel": 0.0, "pipeline": 0.0, "expert": 0.0}
    for name, group in (("tensor_parallel_all_reduce", "tensor_parallel"), ("expert_all_to_all", "expert")):
        if name in totals:
            out[group] = float((totals[name][0][5] * scale) @ weights)
    return out


def validate_inference(run: InferenceRun) -> None:
    """Raise `InferenceConfigError` naming the input at fault if `run` cannot be built."""
    m, par, prec, wl = run.model, run.parallelism, run.precision, run.workload
    t = par.tensor
    for name, value in (("tensor", t), ("pipeline", par.pipeline), ("data", par.data), ("expert", par.expert)):
        if value < 1:
            raise InferenceConfigError(f"parallelism.{name}", "must be at least 1")
    if m.heads % t:
        raise InferenceConfigError("parallelism.tensor", f"{t} does not divide the model's {m.heads} attention heads")
    if m.kv_heads % t and t % m.kv_heads:
        raise InferenceConfigError(
            "parallelism.tensor", f"{t} and the model's {m.kv_heads} KV heads must divide one another"
        )
    if par.pipeline > m.layers:
        raise InferenceConfigError("parallelism.pipeline", f"{par.pipeline} stages for {m.layers} layers")
    if par.micro_batches is not None and par.micro_batches > wl.batch:
        raise InferenceConfigError(
            "parallelism.micro_batches", f"{par.micro_batches} micro-batches for a batch of {wl.batch}"
        )
    if m.moe is None and par.expert > 1:
        raise InferenceConfigError("parallelism.expert", "expert parallelism needs a mixture-of-experts model")
    if m.moe is not None and par.expert > 1:
        e = par.expert
        if m.moe.experts % e:
            raise InferenceConfigError("parallelism.expert", f"{e} does not divide the model's {m.moe.experts} experts")
        if not ((e <= t and t % e == 0) or (e > t and e % t == 0 and (t * par.data) % e == 0)):
            raise InferenceConfigError(
                "parallelism.expert",
                f"{e} must divide tensor ({t}), or be a multiple of it that divides tensor × data ({t * par.data})",
            )
    hw = run.system.hardware
    for name, dtype in (("activations", prec.activations),):
        try:
            hw.matrix_peak(dtype)
        except ValueError as err:
            raise InferenceConfigError(f"dtypes.{name}", str(err)) from None
    for name, dtype in (("weights", prec.weights), ("kv_cache", prec.kv_cache), ("activations", prec.activations)):
        try:
            dtype_bytes(dtype)
        except ValueError as err:
            raise InferenceConfigError(f"dtypes.{name}", str(err)) from None
    counts_shape = wl.prompt_tokens.shape if wl.counts is None else wl.counts.shape
    if wl.batch < 1 or not wl.prompt_tokens.shape == wl.output_tokens.shape == counts_shape:
        raise InferenceConfigError("workload", "needs at least one request, with prompt and output lengths")
    if np.any(wl.prompt_tokens < 1) or np.any(wl.output_tokens < 1) or np.any(wl.weights < 1):
        raise InferenceConfigError("workload", "prompt and output lengths are at least 1")
    if run.attention not in ("flash", "naive"):
        raise InferenceConfigError("implementation.attention", f"unknown attention implementation {run.attention!r}")


def estimate_inferences(runs: Sequence[InferenceRun]) -> list[InferenceEstimate]:
    """Estimate many runs with their ops evaluated together (one vectorised call per kind of op and device)."""
    ev = _Evaluator()
    plans = []
    for index, run in enumerate(runs):
        ev.owner = index
        try:
            plans.append(_RunPlan(run, ev))
        except InferenceConfigError as err:
            raise InferenceConfigError(err.field, err.message, index) from None
    ev.run()
    return [plan.assemble() for plan in plans]


def estimate_inference(run: InferenceRun) -> InferenceEstimate:
    """A whole inference run on one replica (`InferenceRun.parallelism` devices): prefill, decode steps (first, mean,
    last), per-op breakdowns per phase, memory per device, the largest batch that fits and communication. Times in
    seconds, bytes per device."""
    return estimate_inferences([run])[0]
