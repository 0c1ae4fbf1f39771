"""The training planner: `POST /v1/plan/training`.

For a model, a token budget and a cluster (one hardware profile, a device count or a range of counts), the planner
searches data × tensor (with or without sequence parallelism) × pipeline (1F1B or interleaved) × sharding (ZeRO,
FSDP) × micro-batch × recomputation for the fastest steps that fit in memory, and answers the best `max_results`
configurations, each with its whole step estimate (as `POST /v1/estimate/training` renders it) and the time, cost
and energy of training on the budget, with how many configurations were searched, pruned for memory and invalid.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator

from schemas import limits
from schemas.common import PositiveFloat
from schemas.estimates import EstimateContext
from schemas.inference import Degree, Fleet, ModelRef, PlainPaths, Tokens
from schemas.training import (
    GRADIENT_BUCKETS,
    GradientBuckets,
    Optimizer,
    OverlapSpec,
    Recompute,
    Schedule,
    ShardingSpec,
    TrainingAttention,
    TrainingDtypes,
    TrainingRead,
    TrainingRunRead,
)

MAX_CANDIDATES = limits.MAX_TRAINING_PLAN_CANDIDATES


class DeviceRange(PlainPaths):
    """Device counts min, min + step, … ≤ max."""

    min: Fleet
    max: Fleet
    step: Fleet = Field(default=1, description="e.g. 8 for whole 8-GPU nodes.")

    @model_validator(mode="after")
    def _bounded(self) -> DeviceRange:
        if self.min > self.max:
            raise ValueError("min must not exceed max")
        if len(self.counts()) > limits.MAX_PLAN_DEVICE_COUNTS:
            raise ValueError(f"at most {limits.MAX_PLAN_DEVICE_COUNTS} device counts; raise step or narrow the range")
        return self

    def counts(self) -> range:
        return range(self.min, self.max + 1, self.step)


def _devices_tag(value: Any) -> str:
    return "range" if isinstance(value, Mapping | DeviceRange) else "count"


Devices = Annotated[
    Annotated[Fleet, Tag("count")] | Annotated[DeviceRange, Tag("range")],
    Discriminator(_devices_tag),
    Field(description="Devices in all, or a range of counts to search (each count's layouts are searched)."),
]


def _distinct(values: list[object]) -> list[object]:
    if len(set(map(repr, values))) != len(values):
        raise ValueError("values must be distinct")
    return values


class TrainingSearch(PlainPaths):
    """The axes searched. Sequence parallelism applies where tensor > 1, schedules where pipeline > 1, shardings where
    data > 1: elsewhere a layout is one step (without sequence parallelism, 1F1B, the first sharding listed),
    searched once."""

    tensor: list[Degree] = Field(default_factory=lambda: [1, 2, 4, 8], min_length=1, max_length=limits.MAX_LIST)
    sequence_parallel: list[bool] = Field(default_factory=lambda: [False, True], min_length=1, max_length=2)
    pipeline: list[Degree] = Field(default_factory=lambda: [1, 2, 4, 8], min_length=1, max_length=limits.MAX_LIST)
    schedule: list[Schedule] = Field(
        default_factory=lambda: [Schedule.one_f_one_b, Schedule.interleaved], min_length=1, max_length=2
    )
    virtual_stages: list[Annotated[int, Field(ge=2, le=limits.MAX_DEGREE)]] = Field(
        default_factory=lambda: [2], min_length=1, max_length=limits.MAX_LIST,
        description="Model chunks per device tried under the interleaved schedule.",
    )  # fmt: skip
    context: list[Degree] = Field(default_factory=lambda: [1], min_length=1, max_length=limits.MAX_LIST)
    sharding: list[ShardingSpec] = Field(
        default_factory=lambda: [ShardingSpec(zero=z) for z in range(4)], min_length=1, max_length=16,
        description="Sharding of states over the data group, each tried.",
    )  # fmt: skip
    micro_batch: list[Annotated[int, Field(ge=1, le=limits.MAX_BATCH)]] = Field(
        default_factory=lambda: [1, 2, 4, 8], min_length=1, max_length=limits.MAX_LIST
    )
    recompute: list[Recompute] = Field(default_factory=lambda: list(Recompute), min_length=1, max_length=3)

    _unique = field_validator(
        "tensor", "sequence_parallel", "pipeline", "schedule", "virtual_stages", "context", "sharding", "micro_batch",
        "recompute",
    )(_distinct)  # fmt: skip

    def layouts(self) -> int:
        """Layouts per device count, before validation (the count `max_candidates` bounds)."""
        t = sum(1 if tensor == 1 else len(self.sequence_parallel) for tensor in self.tensor)
        schedules = (Schedule.one_f_one_b in self.schedule) + (Schedule.interleaved in self.schedule) * len(
            self.virtual_stages
        )
        p = sum(1 if pipeline == 1 else schedules for pipeline in self.pipeline)
        return t * p * len(self.context) * len(self.sharding) * len(self.micro_batch) * len(self.recompute)


class RankBy(StrEnum):
    time = "time"
    device_hours = "device_hours"


class TrainingPlanRequest(EstimateContext, PlainPaths):
    """`hardware`, `hardware_patch` and `options` (launch overhead, efficiencies) as for op estimates."""

    model: ModelRef
    devices: Devices
    sequence: Tokens = Field(description="Tokens per sequence.")
    global_batch: Annotated[int, Field(ge=1, le=limits.MAX_GLOBAL_BATCH)] = Field(
        description="Sequences per optimizer step (fixed by the training recipe; the planner does not change it)."
    )
    train_tokens: Annotated[float, Field(gt=0, le=limits.MAX_TRAIN_TOKENS, allow_inf_nan=False)] = Field(
        description="The token budget: time, cost and energy are for training on this many tokens."
    )
    price_per_device_hour: PositiveFloat | None = Field(default=None, description="Price of one device for an hour.")
    dtypes: TrainingDtypes = Field(default_factory=TrainingDtypes)
    optimizer: Optimizer = Field(default=Optimizer.adamw)
    overlap: OverlapSpec = Field(default_factory=OverlapSpec)
    attention: TrainingAttention = Field(default=TrainingAttention.flash, description="FlashAttention-2 or unfused.")
    gradient_buckets: GradientBuckets = Field(default="views", description=GRADIENT_BUCKETS)
    # validate_default: the default search is held to the limit too (a range of device counts multiplies it).
    search: TrainingSearch = Field(
        default_factory=TrainingSearch,
        validate_default=True,
        description=f"The axes searched; device counts × layouts must stay within {MAX_CANDIDATES} configurations "
        "(the default search is 2 352 per device count).",
    )
    rank_by: RankBy = Field(
        default=RankBy.time,
        description="time: the fastest step first (= the shortest time to train); device_hours: the fewest "
        "device-hours (= the lowest cost) first. Ties go to fewer devices, then less memory.",
    )
    max_results: Annotated[int, Field(ge=1, le=limits.MAX_TRAINING_PLAN_RESULTS)] = Field(
        default=5, description="Configurations answered, each with its whole estimate."
    )

    # A field validator (devices comes before search), so that the error names body.search.
    @field_validator("search")
    @classmethod
    def _size(cls, s: TrainingSearch, info: ValidationInfo) -> TrainingSearch:
        devices = info.data.get("devices")
        counts = len(devices.counts()) if isinstance(devices, DeviceRange) else 1
        candidates = counts * s.layouts()
        if candidates > MAX_CANDIDATES:
            raise ValueError(
                f"the search has {candidates} configurations (device counts × tensor and sequence parallelism × "
                f"pipeline and schedules × context × sharding × micro-batch × recompute); at most {MAX_CANDIDATES}"
                " are allowed"
            )
        return s

    def device_counts(self) -> list[int]:
        return list(self.devices.counts()) if isinstance(self.devices, DeviceRange) else [self.devices]


class PlannedSharding(BaseModel):
    zero: int
    fsdp: str | None
    shard_group: int | None


class TrainingLayout(BaseModel):
    devices: int
    data: int
    tensor: int
    sequence_parallel: bool
    pipeline: int
    schedule: Schedule
    virtual_stages: int
    context: int
    sharding: PlannedSharding
    micro_batch: int
    micro_batches: int = Field(description="Micro-batches per replica and step (gradient accumulation).")
    recompute: Recompute


class TrainingPlanCandidate(BaseModel):
    rank: int = Field(description="1 for the best.")
    layout: TrainingLayout
    step_s: float
    tokens_per_s: float
    mfu: float
    memory_per_device_bytes: float
    capacity_bytes: float
    training: TrainingRunRead = Field(description="Time, device-hours, cost and energy to train on the budget.")
    estimate: TrainingRead = Field(description="The whole step, as POST /v1/estimate/training answers it.")


class TrainingPlanRead(BaseModel):
    model: str
    hardware: str
    ranked_by: RankBy
    configurations: list[TrainingPlanCandidate] = Field(
        description="The best configurations that fit in memory, best first (empty when none fits)."
    )
    searched: int = Field(description="Configurations searched: invalid + pruned_for_memory + evaluated.")
    invalid: int = Field(description="Configurations that cannot be built (see invalid_by_field and reasons).")
    pruned_for_memory: int = Field(description="Valid configurations whose memory per device exceeds the device's.")
    evaluated: int = Field(description="Configurations that fit and were timed.")
    invalid_by_field: dict[str, int] = Field(description="Invalid configurations by the input at fault.")
    reasons: dict[str, str] = Field(description="One reason per input at fault.")
    smallest_pruned_memory_bytes: float | None = Field(
        description="The least memory per device among the configurations pruned for memory (how far off)."
    )
    unfinished: int = Field(
        default=0,
        description="Configurations not searched because the request's time limit came first (the header "
        "`Ridgeline-Partial` says so too): narrow the search to see them.",
    )
    partial: bool = Field(
        default=False,
        description="True when the search stopped at the request's time limit with configurations unfinished: the "
        "ranking covers only those searched.",
    )


__all__ = [
    "DeviceRange",
    "RankBy",
    "TrainingLayout",
    "TrainingPlanCandidate",
    "TrainingPlanRead",
    "TrainingPlanRequest",
    "TrainingSearch",
]
