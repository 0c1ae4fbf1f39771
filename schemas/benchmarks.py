"""Measured timings: what a worker uploads (`POST /v1/benchmarks`) and what the service gives back.

A run is one worker session on one device, with its software versions and the timing scope of its numbers; each
result is an op (the same JSON object as `/v1/estimate/op`'s `op`, or a `collective`) and its measured statistics.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, ValidationInfo, field_validator, model_validator

from schemas import limits
from schemas.common import Dtype, InputModel, ShortText, UtcDatetime
from schemas.ops import LEAF_OPS, Chain

MAX_RESULTS = limits.MAX_RESULTS
Seconds = Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False, description="Seconds, 0 < t ≤ 3600.")]


class TimingScope(StrEnum):
    """What one measured number covers (see ../shared/validation/README.md for why it matters)."""

    kernel = "kernel"  # device time of the kernels (profiler sums, triton do_bench): no launch gaps
    graph_replay = "graph_replay"  # average over CUDA-graph / XLA executable replays: no host launch
    wall_clock = "wall_clock"  # host time around call + synchronize: launch and sync included


class CollectiveKind(StrEnum):
    all_gather = "all_gather"
    reduce_scatter = "reduce_scatter"
    all_reduce = "all_reduce"
    all_to_all = "all_to_all"
    broadcast = "broadcast"
    reduce = "reduce"
    send_recv = "send_recv"


class Collective(InputModel):
    """A collective over `devices` devices (measured only: the op estimates do not model collectives).

    `bytes` follows nccl-tests: the gathered output for all_gather, the total input for reduce_scatter and
    all_reduce, the per-device buffer for the others."""

    kind: Literal["collective"] = "collective"
    collective: CollectiveKind
    bytes: Annotated[
        int, Field(gt=0, le=limits.MAX_MESSAGE_BYTES, description="Message size in bytes (nccl-tests convention).")
    ]
    devices: Annotated[int, Field(ge=2, le=limits.MAX_DEVICES)]
    dtype: Dtype = Dtype.bf16


class TrainingStep(InputModel):
    """One optimizer step of a small decoder-only transformer on one device (measured only: the prediction is the
    training core's step, `roofline.estimate_training`): pre-norm layers of multi-head attention (no biases, layer
    norms, learned positions) and a GELU FFN of width `ffn`, an untied LM head and cross-entropy, forward, backward
    and an AdamW update, `batch` sequences of `sequence` tokens, all in `dtype`."""

    kind: Literal["training_step"] = "training_step"
    layers: Annotated[int, Field(ge=1, le=limits.MAX_LAYERS)]
    hidden: Annotated[int, Field(ge=1, le=limits.MAX_DIM)]
    heads: Annotated[int, Field(ge=1, le=limits.MAX_HEADS)]
    ffn: Annotated[int, Field(ge=1, le=limits.MAX_DIM)]
    vocab: Annotated[int, Field(ge=1, le=limits.MAX_DIM)]
    sequence: Annotated[int, Field(ge=1, le=limits.MAX_TOKENS)]
    batch: Annotated[int, Field(ge=1, le=limits.MAX_BATCH)]
    dtype: Literal["fp32", "bf16", "fp16"] = "fp32"

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> TrainingStep:
        if self.hidden % self.heads:
            raise ValueError("heads must divide hidden")
        return self


# The estimate ops (schemas.ops.Op), collectives and training steps, one flat union on `kind`.
ResultOp = Annotated[LEAF_OPS | Chain | Collective | TrainingStep, Field(discriminator="kind")]

SoftwareName = Annotated[str, StringConstraints(min_length=1, max_length=40, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")]
SoftwareVersion = Annotated[str, StringConstraints(min_length=1, max_length=100, strip_whitespace=True)]


class BenchmarkResultCreate(InputModel):
    op: ResultOp
    median_s: Seconds
    p10_s: Seconds | None = Field(default=None, description="10th percentile of the repeats; at most median_s.")
    p90_s: Seconds | None = Field(default=None, description="90th percentile of the repeats; at least median_s.")
    repeats: Annotated[int, Field(ge=1, le=limits.MAX_REPEATS)] = 1

    @field_validator("p10_s")
    @classmethod
    def _p10_below_median(cls, value: float | None, info: ValidationInfo) -> float | None:
        median = info.data.get("median_s")
        if value is not None and median is not None and value > median:
            raise ValueError(f"p10_s must not exceed median_s ({median:g})")
        return value

    @field_validator("p90_s")
    @classmethod
    def _p90_above_median(cls, value: float | None, info: ValidationInfo) -> float | None:
        median = info.data.get("median_s")
        if value is not None and median is not None and value < median:
            raise ValueError(f"p90_s must be at least median_s ({median:g})")
        return value


class BenchmarkRunCreate(InputModel):
    hardware: ShortText = Field(
        description="A catalogue slug (a100-sxm-80gb), or the device's own description (`NVIDIA A100-SXM4-80GB`, "
        "`TPU v5 lite`), which the service maps to a profile as GET /v1/hardware/resolve does."
    )
    host: ShortText = Field(description="The worker host that measured the run.")
    software: dict[SoftwareName, SoftwareVersion] = Field(
        default_factory=dict,
        max_length=32,
        description="Versions of what ran the kernels: driver, cuda, jax, jaxlib, xla, triton, libtpu, torch…",
    )
    timing_scope: TimingScope
    host_overhead_s: float | None = Field(
        default=None,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="wall_clock runs only: the fixed host cost of one call in this run (the framework's dispatch "
        "and the synchronisation after it), 0 ≤ s ≤ 1, as measured on the same host (ridgeline-worker's dispatch "
        "probe on accelerators). Given, each result is predicted as its kernel time (scope `kernel`) plus this once "
        "per call; omitted, with the profile's kernel launch cost per kernel.",
    )
    results: list[BenchmarkResultCreate] = Field(min_length=1, max_length=MAX_RESULTS)

    @field_validator("host_overhead_s")
    @classmethod
    def _overhead_is_wall_clock(cls, value: float | None, info: ValidationInfo) -> float | None:
        scope = info.data.get("timing_scope")
        if value is not None and scope is not None and scope is not TimingScope.wall_clock:
            raise ValueError(
                "applies to wall_clock runs only (kernel and graph_replay timings hold no host cost); omit it or null"
            )
        return value


class BenchmarkRunCreated(BaseModel):
    """The answer to an upload; a retry with the same Idempotency-Key gets the same one."""

    id: int
    hardware: str = Field(description="The profile the results are held against.")
    device: str | None = Field(default=None, description="The description the upload named, when not a slug.")
    results: int = Field(description="Results stored.")
    predicted: int = Field(description="Results with a prediction (collectives have none).")
    calibrated: int = Field(description="Results with a calibrated prediction too.")
    calibration_id: int | None = None
    median_measured_over_predicted: float | None = None
    created_at: UtcDatetime


class BenchmarkRunRead(BaseModel):
    id: int
    hardware: str
    hardware_version: int = Field(
        description="The profile's version its results were predicted with (GET /v1/hardware/{slug}/versions/{n})."
    )
    device: str | None
    host: str
    software: dict[str, str]
    timing_scope: TimingScope
    host_overhead_s: float | None = Field(
        default=None, description="The per-call host cost the upload gave (wall_clock runs), added to each prediction."
    )
    results: int
    median_measured_over_predicted: float | None
    api_key: str | None = Field(
        default=None,
        description="Name of the key that uploaded the run: shown to that key and to admin keys, null to others.",
    )
    created_at: UtcDatetime


class BenchmarkResultRead(BaseModel):
    id: int
    op: dict[str, Any]
    op_kind: str
    dtype: str
    median_s: float
    p10_s: float | None
    p90_s: float | None
    repeats: int
    predicted_s: float | None = Field(description="The raw model's time for this op in this run's timing scope.")
    measured_over_predicted: float | None
    calibrated_s: float | None
    calibration_id: int | None
    measured_over_calibrated: float | None
    flops: float | None
    bytes: float | None
    arithmetic_intensity: float | None
    achieved_flops_per_s: float | None = Field(description="The op's FLOPs over the measured median.")


class BenchmarkRunDetail(BenchmarkRunRead):
    items: list[BenchmarkResultRead] = Field(description="One page of the run's results, in upload order.")
    total: int
    limit: int
    offset: int


class HardwareResolution(BaseModel):
    device: str = Field(description="The description asked about.")
    slug: str
    name: str
    rule: str = Field(description="Why this profile: the slug, a profile name, or the pattern that matched.")
