"""What an inference run is made of: the model (`Transformer`, with `Moe` and `Mla`), the devices (`System`), the
parallel layout (`Parallelism`), storage types (`Precision`), the requests (`Workload`), and the checks that say which
input is at fault when a run cannot be built (`validate_inference`). A `Corrector` (calibration) sees ops as
`OpGroup`s and answers `Corrected` times."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from roofline._hardware import Hardware, dtype_bytes
from roofline._num import Array
from roofline.collectives import Topology
from roofline.intervals import IntervalTable

IntArray = NDArray[np.int64]


class InferenceConfigError(ValueError):
    """A run that cannot be built; `field` names the input at fault (e.g. `parallelism.tensor`)."""

    def __init__(self, field: str, message: str, index: int | None = None) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.index = index  # which run of `estimate_inferences`


@dataclass(frozen=True)
class Moe:
    """Mixture-of-experts FFN: `experts` routed experts of width `expert_ffn`, `top_k` per token, plus
    `shared_experts` (of the same width) every token uses. The first `dense_layers` layers have a dense FFN (the
    model's `ffn`) instead (DeepSeek-V3's first_k_dense_replace), and past them every `layer_step`-th layer is a
    MoE layer, the others dense (Llama 4's interleave_moe_layer_step: layer i, counted from 0, is MoE when
    (i + 1) is a multiple of the step, as Hugging Face's and vLLM's Llama 4 place them)."""

    experts: int
    top_k: int
    expert_ffn: int
    shared_experts: int = 0
    dense_layers: int = 0
    layer_step: int = 1

    def is_moe_layer(self, index: IntArray) -> NDArray[np.bool_]:
        """Which of the layers `index` (counted from 0) are MoE layers."""
        out: NDArray[np.bool_] = (index >= self.dense_layers) & ((index + 1) % self.layer_step == 0)
        return out

    def moe_layers(self, layers: int) -> int:
        """MoE layers among a model's `layers`: the multiples of `layer_step` in (dense_layers, layers]."""
        return max(0, layers // self.layer_step - min(self.dense_layers, layers) // self.layer_step)


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


FP8_SCALINGS = ("tensor", "block")


@dataclass(frozen=True)
class Precision:
    """Storage types. Matmuls compute at the activation dtype's peak and read their weight operand at the weight
    dtype's size (weight-only quantisation dequantises in the kernel: W8A16, W4A16); W8A8 is weights and
    activations both fp8 or int8. Embedding and LM-head tables, norms and biases stay 16-bit when the weights
    are narrower, as quantised checkpoints keep them."""

    weights: str = "bf16"
    activations: str = "bf16"
    kv_cache: str = "bf16"
    # The attention projections' type, weights and product both (QKV, output, MLA's down, up and absorbed ones);
    # None: `weights` and `activations` as every other linear layer. NVFP4 checkpoints of DeepSeek-R1 and Kimi-K2.5
    # keep their self-attention blocks in bf16 (`exclude_modules` of their quantisation configs, as aiconfigurator-core
    # 0.12's `sdk/models/deepseek.py` reads them): only the experts and the MLPs run in fp4.
    attention: str | None = None
    # How W8A8 fp8 products are scaled (`FP8_SCALINGS`): "tensor", one scale per tensor (the FP8 checkpoints of
    # Llama and most dense models, TensorRT Model Optimizer's per-tensor input scales), or "block": DeepSeek-V3's
    # 128 × 128 weight blocks and 1 × 128 activation groups (its technical report §3.3; DeepSeek-R1's checkpoint
    # too), products and quantisation as `roofline.ops.QUANTIZATIONS["fp8_block"]` runs them.
    fp8_scaling: str = "tensor"

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
    """Devices of one kind: the device, the collective topology a group of n of them uses (`roofline.collectives`:
    the service builds it from the profile's fabrics), the device's board power in watts, an optional
    correction of every op's and collective's modelled time (`Corrector`), and an optional table of prediction
    intervals (`roofline.intervals`): with it, every op's time carries its family's band and the phases their sums."""

    hardware: Hardware
    topology: Callable[[int], Topology] | None = None
    power_w: float | None = None
    correct: Corrector | None = None
    intervals: IntervalTable | None = None


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


TENSOR_ALL_REDUCES = ("library", "custom")


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
    # The tensor-parallel all-reduce: "library", the collective library's fastest algorithm (NCCL's ring or in-switch
    # reduction); "custom", the serving engines' own one-shot/two-shot kernels ("direct") over an NVLink switch for
    # messages under `roofline.CUSTOM_ALL_REDUCE_MAX_BYTES`, the library beyond and off NVLink (TensorRT-LLM's
    # AllReduceStrategy AUTO, vLLM's and SGLang's custom all-reduce, each on by default).
    tensor_all_reduce: str = "library"


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
    if m.moe is not None and m.moe.layer_step < 1:
        raise InferenceConfigError("model.moe.layer_step", "must be at least 1")
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
    for name, dtype in (("activations", prec.activations), ("attention", prec.attention)):
        if dtype is None:
            continue
        try:
            hw.matrix_peak(dtype)
        except ValueError as err:
            raise InferenceConfigError(f"dtypes.{name}", str(err)) from None
    if prec.fp8_scaling not in FP8_SCALINGS:
        raise InferenceConfigError(
            "dtypes.fp8_scaling", f"unknown fp8 scaling {prec.fp8_scaling!r}; known: {', '.join(FP8_SCALINGS)}"
        )
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
    if run.tensor_all_reduce not in TENSOR_ALL_REDUCES:
        raise InferenceConfigError(
            "implementation.all_reduce",
            f"unknown all-reduce {run.tensor_all_reduce!r}; known: {', '.join(TENSOR_ALL_REDUCES)}",
        )
    if run.attention not in ("flash", "naive"):
        raise InferenceConfigError("implementation.attention", f"unknown attention implementation {run.attention!r}")
    _check_fabric(run)


def _check_fabric(run: InferenceRun) -> None:
    """Every device group the run's collectives span fits the system's fabric (whole nodes beyond one scale-up
    domain: `roofline.collectives.device_topology`), checked before any op is evaluated; the field is the degree that
    sets the group. The groups are those `RunPlan` and `LayerOps` register: the tensor all-reduce over `tensor`
    devices, the expert all-to-all over `expert` when it exceeds `tensor`, the pipeline send over tensor × pipeline."""
    m, par = run.model, run.parallelism
    groups = (
        ("parallelism.tensor", "all_reduce", par.tensor),
        ("parallelism.expert", "all_to_all", par.expert if m.moe is not None and par.expert > par.tensor else 1),
        ("parallelism.pipeline", "send_recv", par.tensor * par.pipeline if par.pipeline > 1 else 1),
    )
    topology = run.system.topology
    for degree, op, devices in groups:
        if devices < 2:
            continue
        if topology is None:
            raise InferenceConfigError("hardware", f"{run.system.hardware.name} has no interconnect for a "
                                       f"{devices}-device {op}")  # fmt: skip
        try:
            topology(devices)
        except ValueError as err:
            raise InferenceConfigError(degree, str(err)) from None
