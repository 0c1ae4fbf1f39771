"""Training steps: `POST /v1/estimate/training`.

A step is a model (catalogue slug or inline config) on `devices` devices of one hardware profile, laid out by
`parallelism` (tensor with or without sequence parallelism, pipeline 1F1B or interleaved, context, data, expert),
states sharded by `sharding` (ZeRO 0-3, FSDP), `global_batch` sequences of `sequence` tokens in micro-batches of
`micro_batch`, with a recomputation policy and an optimizer. Times are seconds on the busiest device, memory is
bytes on the busiest device, FLOPs count every device.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from schemas import limits
from schemas.common import InputModel, PositiveFloat
from schemas.estimates import EstimateContext
from schemas.inference import Degree, Fleet, ModelRef, PlainPaths, Tokens


class Schedule(StrEnum):
    one_f_one_b = "1f1b"
    interleaved = "interleaved"


class Recompute(StrEnum):
    none = "none"
    selective = "selective"
    full = "full"


class Optimizer(StrEnum):
    adamw = "adamw"
    sgd = "sgd"


class TrainingAttention(StrEnum):
    flash = "flash"
    naive = "naive"


GradientBuckets = Literal["views", "copies"]
GRADIENT_BUCKETS = (
    "Data-parallel gradient buckets: views of the gradients (Megatron-LM's contiguous gradient buffer) or copies "
    "(PyTorch DDP's default, gradient_as_bucket_view=False: one more copy of the gradients)."
)


class TrainingParallelismSpec(InputModel):
    tensor: Degree = Field(default=1, description="Megatron-LM tensor parallelism.")
    sequence_parallel: bool = Field(
        default=False, description="Sequence parallelism in the tensor group (Korthikanti et al. 2022)."
    )
    pipeline: Degree = Field(default=1, description="Pipeline stages; the layers must split evenly.")
    schedule: Schedule = Field(default=Schedule.one_f_one_b, description="1F1B, or interleaved (Narayanan 2021).")
    virtual_stages: Annotated[int, Field(ge=1, le=limits.MAX_DEGREE)] = Field(
        default=1, description="Model chunks per device under the interleaved schedule."
    )
    context: Degree = Field(default=1, description="Context parallelism: the sequence split over devices.")
    data: Fleet | None = Field(
        default=None, description="Data-parallel replicas; default devices / (tensor × context × pipeline)."
    )
    expert: Degree = Field(default=1, description="Expert parallelism over the data group (mixture of experts).")


class ShardingSpec(InputModel):
    zero: Annotated[int, Field(ge=0, le=3)] = Field(
        default=0, description="ZeRO stage: 1 shards optimizer states, 2 also gradients, 3 also weights."
    )
    fsdp: Literal["full", "hybrid"] | None = Field(
        default=None, description="PyTorch FSDP: full (= ZeRO-3) or hybrid (shard in a group, replicate across)."
    )
    shard_group: Fleet | None = Field(
        default=None, description="Devices a hybrid shard spans (must divide data); default the whole data group."
    )


class TrainingDtypes(InputModel):
    compute: Literal["bf16", "fp16"] = Field(
        default="bf16", description="Mixed precision: weights, gradients, activations; fp32 master and states."
    )
    matmul: Literal["fp8"] | None = Field(default=None, description="fp8 GEMMs for the linear layers.")


class OverlapSpec(InputModel):
    """Defaults are the engines': Megatron-LM overlaps neither the gradient reduction nor TP communication unless
    asked (`--overlap-grad-reduce`, `--tp-comm-overlap`); PyTorch FSDP prefetches (BACKWARD_PRE)."""

    data_parallel: bool = Field(default=False, description="Gradient reduction under the last backward pass.")
    fsdp_prefetch: bool = Field(default=True, description="FSDP all-gathers under the compute.")
    tensor_parallel: bool = Field(default=False, description="TP collectives under the GEMMs.")


class TrainingRequest(EstimateContext, PlainPaths):
    """`hardware`, `hardware_patch` and `options` (launch overhead, efficiencies) as for op estimates."""

    model: ModelRef
    devices: Fleet | None = Field(default=None, description="Devices in all; must equal the parallelism's product.")
    parallelism: TrainingParallelismSpec = Field(default_factory=TrainingParallelismSpec)
    sharding: ShardingSpec = Field(default_factory=ShardingSpec)
    sequence: Tokens = Field(description="Tokens per sequence.")
    micro_batch: Annotated[int, Field(ge=1, le=limits.MAX_BATCH)] = Field(description="Sequences per micro-batch.")
    global_batch: Annotated[int, Field(ge=1, le=limits.MAX_GLOBAL_BATCH)] = Field(
        description="Sequences per optimizer step; a multiple of micro_batch × data (gradient accumulation follows)."
    )
    dtypes: TrainingDtypes = Field(default_factory=TrainingDtypes)
    recompute: Recompute = Field(default=Recompute.none, description="Activation recomputation policy.")
    optimizer: Optimizer = Field(default=Optimizer.adamw)
    overlap: OverlapSpec = Field(default_factory=OverlapSpec)
    attention: TrainingAttention = Field(default=TrainingAttention.flash, description="FlashAttention-2 or unfused.")
    gradient_buckets: GradientBuckets = Field(default="views", description=GRADIENT_BUCKETS)
    train_tokens: Annotated[float, Field(gt=0, le=limits.MAX_TRAIN_TOKENS, allow_inf_nan=False)] | None = Field(
        default=None, description="Tokens to train on, for the time, cost and energy of the whole run."
    )
    price_per_device_hour: PositiveFloat | None = Field(default=None, description="Price of one device for an hour.")


class TrainingOpRow(BaseModel):
    name: str
    kind: str = Field(description="matmul, attention or memory (a memory-bound op).")
    forward_s: float
    backward_s: float
    recompute_s: float


class TrainingCommunicationRow(BaseModel):
    name: str
    op: str
    devices: int
    bytes: float = Field(description="Per call, nccl-tests convention.")
    calls: float = Field(description="Per step on the busiest device.")
    time_s: float
    exposed_s: float = Field(description="The part not hidden under computation.")


class TrainingMemoryRead(BaseModel):
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    buffers_bytes: float = Field(description="gradient_bucket_bytes + gathered_bytes.")
    gradient_bucket_bytes: float = Field(description="Data-parallel buckets that copy the gradients (DDP's default).")
    gathered_bytes: float = Field(
        description="FSDP / ZeRO-3: unsharded layers (the next one prefetched) and a gradient awaiting reduce-scatter."
    )
    total_bytes: float
    capacity_bytes: float
    fits: bool
    max_micro_batch: int = Field(description="The largest micro-batch whose memory fits.")


class TrainingRunRead(BaseModel):
    tokens: float
    time_s: float
    device_hours: float
    cost: float | None
    energy_j: float | None


class TrainingRead(BaseModel):
    model: str
    hardware: str
    devices: int
    data: int
    micro_batches: int = Field(description="Micro-batches per replica and step (gradient accumulation).")
    step_s: float
    tokens_per_s: float
    step_s_p10: float | None = Field(
        default=None,
        description="The step with every op at the 10th percentile of its family's leave-one-device-out residuals "
        "(with step_s_p90: the prediction interval, docs/model/intervals.md); collectives at their own band's.",
    )
    step_s_p90: float | None = Field(default=None, description="The step with every op at the 90th percentile.")
    tokens_per_s_p10: float | None = Field(default=None, description="Tokens per step over step_s_p90.")
    tokens_per_s_p90: float | None = Field(default=None, description="Tokens per step over step_s_p10.")
    mfu: float = Field(description="Model FLOPs (no recomputation) over the devices' peak.")
    hfu: float = Field(description="FLOPs run, recomputation included, over the devices' peak.")
    model_flops: float
    hardware_flops: float
    forward_s: float
    backward_s: float
    recompute_s: float
    optimizer_s: float
    bubble_s: float
    communication_exposed_s: float
    ops: list[TrainingOpRow]
    communication: list[TrainingCommunicationRow]
    memory: TrainingMemoryRead
    training: TrainingRunRead | None = None
