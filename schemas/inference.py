"""Whole inference runs: `POST /v1/estimate/inference` (one run) and `/v1/estimate/inference/batch` (many).

A run is a model (catalogue slug or inline config) on `devices` devices of one hardware profile, laid out by
`parallelism`, serving `workload` with `dtypes`. Times are seconds, memory is bytes on the busiest device,
throughput counts output tokens over all data-parallel replicas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from schemas import limits
from schemas.common import InputModel, PositiveFloat
from schemas.estimates import EstimateContext
from schemas.models import ModelCreate
from schemas.ops import AttentionImpl

Tokens = Annotated[int, Field(gt=0, le=limits.MAX_TOKENS, description="Tokens, 1 … 2 097 152.")]
Degree = Annotated[int, Field(ge=1, le=limits.MAX_DEGREE)]  # one parallelism degree inside a replica
Fleet = Annotated[int, Field(ge=1, le=limits.MAX_DEVICES)]  # devices, replicas or workers of a job or a fleet
MAX_BATCH_ITEMS = limits.MAX_BATCH_ITEMS
SlugRef = Annotated[str, Field(min_length=1, max_length=limits.SLUG_LENGTH)]


def _model_tag(value: Any) -> str:
    return "config" if isinstance(value, Mapping | ModelCreate) else "slug"


ModelRef = Annotated[
    Annotated[SlugRef, Tag("slug")] | Annotated[ModelCreate, Tag("config")],
    Discriminator(_model_tag),
    Field(
        description="A catalogue slug (e.g. llama-3-70b), or a whole inline config (the body POST /v1/models takes)."
    ),
]

# Tags pydantic inserts in an error's location for these unions: dropped so a field reads as the client wrote it.
_UNION_TAGS = {"model": {"slug", "config"}, "hardware": {"slug", "profile"}, "devices": {"count", "range"}}


def plain_location(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """`model.config.layers` → `model.layers`, `items.0.hardware.profile.memory` → `items.0.hardware.memory`."""
    out: list[int | str] = []
    for i, part in enumerate(loc):
        j = i - 1
        while j >= 0 and isinstance(loc[j], int):  # `hardware.0.profile`: a list of the union
            j -= 1
        prev = loc[j] if j >= 0 else None
        if isinstance(prev, str) and isinstance(part, str) and part in _UNION_TAGS.get(prev, ()):
            continue
        out.append(part)
    return tuple(out)


def _plain(err: ValidationError) -> ValidationError:
    errors: list[InitErrorDetails] = []
    for e in err.errors():
        detail = InitErrorDetails(type=e["type"], loc=plain_location(tuple(e["loc"])), input=e["input"])
        if "ctx" in e:
            detail["ctx"] = e["ctx"]
        errors.append(detail)
    try:
        return ValidationError.from_exception_data(err.title, errors)
    except (KeyError, TypeError, ValueError):  # an error type that cannot be rebuilt: keep pydantic's paths
        return err


class PlainPaths(InputModel):
    """Errors name fields without the union tags (see `plain_location`)."""

    @model_validator(mode="wrap")
    @classmethod
    def _plain_paths(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(data)
        except ValidationError as err:
            raise _plain(err) from None


class InferenceDtype(StrEnum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int8 = "int8"
    int4 = "int4"
    fp4 = "fp4"


class Fp8Scaling(StrEnum):
    tensor = "tensor"
    block = "block"


class Dtypes(InputModel):
    """Storage types. Matmuls compute at the activation dtype's peak and read weights at the weight dtype's size
    (weight-only quantisation: W8A16, W4A16; fp8 or int8 for both is W8A8). Embedding and LM-head tables, norms
    and biases stay 16-bit under narrower weights."""

    weights: InferenceDtype = InferenceDtype.bf16
    activations: InferenceDtype = InferenceDtype.bf16
    kv_cache: InferenceDtype | None = Field(default=None, description="Defaults to the activation dtype.")
    attention: InferenceDtype | None = Field(
        default=None,
        description=(
            "The attention projections' type, weights and product both (QKV, output; MLA's down, up and absorbed "
            "projections). Defaults to the weights' and activations' types. NVFP4 checkpoints of DeepSeek-R1 and "
            "Kimi-K2.5 keep self-attention in bf16: weights and activations fp4, attention bf16."
        ),
    )
    fp8_scaling: Fp8Scaling = Field(
        default=Fp8Scaling.tensor,
        description=(
            "How W8A8 fp8 products are scaled: `tensor`, one scale per tensor (most dense models' FP8 checkpoints), "
            "or `block`, DeepSeek-V3's 128 × 128 weight blocks and 1 × 128 activation groups (DeepSeek-V3 and R1 "
            "checkpoints): the products run at the block-scaled kernels' rate and quantise their input per group."
        ),
    )


class AttentionKind(StrEnum):
    mha = "mha"
    mqa = "mqa"
    gqa = "gqa"


class AttentionOverride(InputModel):
    """A what-if on the model's attention: MHA (KV heads = heads), MQA (one KV head) or GQA with `kv_heads`."""

    kind: AttentionKind
    kv_heads: Annotated[int, Field(ge=1, le=limits.MAX_HEADS)] | None = Field(
        default=None, description="For gqa: KV heads (must divide the heads)."
    )

    @model_validator(mode="after")
    def _kv_heads_for_gqa(self) -> AttentionOverride:
        if (self.kind is AttentionKind.gqa) != (self.kv_heads is not None):
            raise ValueError("kv_heads is given with kind gqa, and only then")
        return self


class AllReduceImpl(StrEnum):
    library = "library"
    custom = "custom"


class Implementation(InputModel):
    attention: AttentionImpl = Field(
        default=AttentionImpl.flash,
        description="flash: one fused kernel; naive: scores, softmax and values as three kernels (eager PyTorch).",
    )
    fused: bool = Field(
        default=True,
        description="Bias, activation and residual add in the matmul epilogues and rotary inside attention; "
        "false: each its own kernel.",
    )
    decode_samples: Annotated[int, Field(ge=16, le=limits.MAX_DECODE_SAMPLES)] = Field(
        default=2048,
        description="Decode steps evaluated one by one up to this many; beyond, this many evenly spaced steps "
        "with the steps between them interpolated (exactly summed).",
    )
    all_reduce: AllReduceImpl = Field(
        default=AllReduceImpl.library,
        description="The tensor-parallel all-reduce. library: the collective library's fastest algorithm (NCCL's "
        "ring or in-switch reduction); custom: a serving engine's own one-shot/two-shot kernels over NVLink for "
        "messages under 2 MiB (TensorRT-LLM, vLLM, SGLang), the library beyond and off NVLink.",
    )


class ParallelismSpec(InputModel):
    tensor: Degree = Field(default=1, description="Megatron tensor parallelism: weights and heads split t ways.")
    pipeline: Degree = Field(default=1, description="Pipeline stages (GPipe), layers split evenly.")
    data: Fleet | None = Field(
        default=None, description="Data-parallel replicas, each serving `workload`; default devices / (t·p)."
    )
    expert: Degree = Field(
        default=1,
        description="Expert parallelism (MoE): experts spread over this many devices of the tensor × data group.",
    )
    micro_batches: Annotated[int, Field(ge=1, le=limits.MAX_BATCH)] | None = Field(
        default=None, description="Pipeline micro-batches; default min(batch, pipeline)."
    )


class RequestShape(InputModel):
    prompt_tokens: Tokens
    output_tokens: Tokens


class InferenceWorkload(InputModel):
    """`batch` requests of `prompt_tokens` and `output_tokens` each, or a list of `requests` of their own lengths,
    decoded together by each replica. The prefill produces each request's first output token."""

    batch: Annotated[int, Field(ge=1, le=limits.MAX_BATCH)] | None = None
    prompt_tokens: Tokens | None = None
    output_tokens: Tokens | None = None
    requests: list[RequestShape] | None = Field(default=None, min_length=1, max_length=limits.MAX_WORKLOAD_REQUESTS)

    @model_validator(mode="after")
    def _one_form(self) -> InferenceWorkload:
        uniform = (self.batch, self.prompt_tokens, self.output_tokens)
        if self.requests is not None:
            if any(v is not None for v in uniform):
                raise ValueError("give either batch, prompt_tokens and output_tokens, or requests")
        elif any(v is None for v in uniform):
            raise ValueError("give batch, prompt_tokens and output_tokens (or a list of requests)")
        return self


class InferenceRequest(EstimateContext, PlainPaths):
    """`hardware`, `hardware_patch` and `options` (launch overhead, efficiencies) as for op estimates."""

    model: ModelRef
    devices: Fleet | None = Field(default=None, description="Devices in all; default tensor × pipeline × data.")
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec)
    workload: InferenceWorkload
    dtypes: Dtypes = Field(default_factory=Dtypes)
    implementation: Implementation = Field(default_factory=Implementation)
    attention: AttentionOverride | None = None
    price_per_device_hour: PositiveFloat | None = Field(
        default=None, description="Price of one device for an hour, for cost_per_million_tokens."
    )


SWEEPABLE = (
    "hardware", "devices", "workload.batch", "workload.prompt_tokens", "workload.output_tokens",
    "parallelism.tensor", "parallelism.pipeline", "parallelism.data", "parallelism.expert", "dtypes.weights",
    "dtypes.activations", "dtypes.kv_cache", "implementation.attention", "implementation.fused",
)  # fmt: skip


class InferenceSweep(InputModel):
    base: InferenceRequest
    vary: dict[
        Annotated[str, Field(max_length=limits.FIELD_PATH_LENGTH)],
        Annotated[
            list[Annotated[str, Field(max_length=limits.SLUG_LENGTH)] | int | bool],
            Field(min_length=1, max_length=MAX_BATCH_ITEMS),
        ],
    ] = Field(
        min_length=1,
        max_length=limits.MAX_SWEEP_FIELDS,
        description="Field path → values; one run per point of their Cartesian product (at most 1000). Paths: "
        + ", ".join(SWEEPABLE)
        + ".",
    )

    @field_validator("vary")
    @classmethod
    def _paths_and_size(cls, vary: dict[str, list[Any]]) -> dict[str, list[Any]]:
        unknown = [path for path in vary if path not in SWEEPABLE]
        if unknown:
            raise ValueError(f"cannot vary {', '.join(unknown)}; paths: {', '.join(SWEEPABLE)}")
        points = math.prod(len(values) for values in vary.values())
        if points > MAX_BATCH_ITEMS:
            raise ValueError(f"the grid has {points} points; at most {MAX_BATCH_ITEMS} are allowed")
        return vary


class InferenceBatchRequest(PlainPaths):
    items: list[InferenceRequest] | None = Field(default=None, min_length=1, max_length=MAX_BATCH_ITEMS)
    sweep: InferenceSweep | None = None

    @model_validator(mode="after")
    def _one_of(self) -> InferenceBatchRequest:
        if (self.items is None) == (self.sweep is None):
            raise ValueError("give exactly one of `items` and `sweep`")
        return self


# --- responses ---------------------------------------------------------------------------------------------------


class OpBound(StrEnum):
    compute = "compute"
    memory = "memory"
    overhead = "overhead"
    communication = "communication"
    idle = "idle"


_P10 = (
    "The time with every op at the 10th percentile of its family's leave-one-device-out residuals (with the 90th: "
    "the prediction interval, docs/model/intervals.md); null with options.calibration."
)
_P90 = "The time with every op at the 90th percentile of its family's residuals; null with options.calibration."


class OpBreakdown(BaseModel):
    """One op of a phase on one device, summed over layers (and decode steps)."""

    op: str
    calls_per_pass: float = Field(description="Kernels (or collectives) of this op in one forward pass.")
    flops: float
    bytes: float = Field(description="Device-memory traffic (for a collective: the messages).")
    time_s: float
    time_s_p10: float | None = Field(default=None, description=_P10)
    time_s_p90: float | None = Field(default=None, description=_P90)
    compute_time_s: float
    memory_time_s: float
    overhead_s: float
    bound: OpBound
    share: float = Field(description="Fraction of the phase's time.")
    raw_time_s: float | None = Field(
        default=None, description="With options.calibration: the physical model's time, before the correction."
    )
    calibration: str | None = Field(
        default=None,
        description="With options.calibration: how its calls were corrected (interpolated, fitted, physical; "
        "several when they differ by call). assumptions.calibration names the calibration per op family.",
    )


class PhaseRead(BaseModel):
    time_s: float
    time_s_p10: float | None = Field(default=None, description=_P10)
    time_s_p90: float | None = Field(default=None, description=_P90)
    raw_time_s: float | None = Field(
        default=None, description="With options.calibration: the phase's time under the physical model."
    )
    communication_time_s: float
    ops: list[OpBreakdown]


class Breakdown(BaseModel):
    prefill: PhaseRead
    decode: PhaseRead = Field(description="Summed over every decode step.")


class DecodeSteps(BaseModel):
    steps: int = Field(description="Decode steps: the longest output minus the token the prefill produces.")
    first_s: float | None
    mean_s: float | None
    last_s: float | None


class MemoryRead(BaseModel):
    """Bytes on the busiest device."""

    weights_bytes: float
    kv_cache_bytes: float = Field(description="At the end of the run: prompt + output − 1 tokens per request.")
    activation_bytes: float = Field(description="Peak transient of the prefill: residual, widest intermediate, logits.")
    total_bytes: float
    capacity_bytes: float
    headroom_bytes: float
    fits: bool


class CommunicationRead(BaseModel):
    total_s: float
    tensor_parallel_s: float = Field(description="Two all-reduces per layer (Megatron).")
    pipeline_s: float = Field(description="Sends between stages on the critical path.")
    expert_s: float = Field(description="Dispatch and combine all-to-alls (expert parallelism wider than tensor).")


class ParametersRead(BaseModel):
    total: float
    embedding: float
    attention: float
    ffn: float
    norms: float
    active_per_token: float


class ParallelismRead(BaseModel):
    tensor: int
    pipeline: int
    data: int
    expert: int
    micro_batches: int


class InferenceRead(BaseModel):
    model: str
    hardware: str
    devices: int
    parallelism: ParallelismRead
    batch: int = Field(description="Requests per replica.")
    prefill_time_s: float = Field(description="Time to first token.")
    decode_step_s: DecodeSteps
    time_per_output_token_s: float | None = Field(description="Mean decode step.")
    decode_time_s: float
    total_time_s: float
    throughput_tokens_per_s: float = Field(description="Output tokens per second over all replicas.")
    prefill_time_s_p10: float | None = Field(default=None, description=_P10)
    prefill_time_s_p90: float | None = Field(default=None, description=_P90)
    time_per_output_token_s_p10: float | None = Field(default=None, description=_P10)
    time_per_output_token_s_p90: float | None = Field(default=None, description=_P90)
    decode_time_s_p10: float | None = Field(default=None, description=_P10)
    decode_time_s_p90: float | None = Field(default=None, description=_P90)
    total_time_s_p10: float | None = Field(default=None, description=_P10)
    total_time_s_p90: float | None = Field(default=None, description=_P90)
    throughput_tokens_per_s_p10: float | None = Field(
        default=None, description="Output tokens over total_time_s_p90: the low end of the throughput's interval."
    )
    throughput_tokens_per_s_p90: float | None = Field(
        default=None, description="Output tokens over total_time_s_p10: the high end of the throughput's interval."
    )
    memory: MemoryRead
    max_batch_that_fits: int = Field(description="Requests shaped like the longest one that fit on the devices.")
    communication_time_s: float
    communication: CommunicationRead
    pipeline_bubble_fraction: float = Field(description="(p − 1)/(m + p − 1) of the prefill (GPipe).")
    parameters: ParametersRead
    breakdown: Breakdown
    price_per_device_hour: float | None
    cost_per_million_tokens: float | None = Field(description="Per million output tokens, with price_per_device_hour.")
    power_per_device_w: float | None = Field(description="The profile's board power (TDP).")
    energy_per_token_j: float | None = Field(
        description="Joules per output token with every device at its TDP for the whole run (an upper bound)."
    )
    warnings: list[str] = Field(default_factory=list)
    assumptions: dict[str, Any] = Field(default_factory=dict)


class InferenceBatchRead(BaseModel):
    items: list[InferenceRead]
    grid: dict[str, list[str | int | bool]] | None = Field(
        default=None, description="For a sweep: each varied path's value at every item, in item order."
    )


__all__ = [
    "SWEEPABLE",
    "AttentionKind",
    "AttentionOverride",
    "Dtypes",
    "Implementation",
    "InferenceBatchRead",
    "InferenceBatchRequest",
    "InferenceDtype",
    "InferenceRead",
    "InferenceRequest",
    "InferenceSweep",
    "InferenceWorkload",
    "ModelRef",
    "OpBreakdown",
    "ParallelismSpec",
    "RequestShape",
    "plain_location",
]
