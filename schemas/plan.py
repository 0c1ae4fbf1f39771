"""The capacity planner: `POST /v1/plan`.

Given a model, a traffic shape, service-level objectives and the hardware to consider, the planner estimates every
configuration of hardware × tensor and pipeline parallelism × batch × dtypes (one replica each), sizes the number of
replicas the traffic needs, and returns the configurations that meet the objectives, cheapest first, each with its
estimate; when none does, the closest ones and which objective each misses.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from schemas import limits
from schemas.common import PositiveFloat
from schemas.estimates import HardwareRef, Options
from schemas.inference import Degree, Dtypes, Implementation, InferenceRead, ModelRef, PlainPaths, Tokens

DEFAULT_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
MAX_CONFIGURATIONS = limits.MAX_PLAN_CONFIGURATIONS


class Traffic(PlainPaths):
    """What the fleet must serve: a request rate or an output-token rate, and the shape of a request."""

    requests_per_s: PositiveFloat | None = None
    output_tokens_per_s: PositiveFloat | None = None
    prompt_tokens: Tokens
    output_tokens: Tokens

    @model_validator(mode="after")
    def _one_rate(self) -> Traffic:
        if (self.requests_per_s is None) == (self.output_tokens_per_s is None):
            raise ValueError("give exactly one of requests_per_s and output_tokens_per_s")
        return self


class Objectives(PlainPaths):
    time_to_first_token_s: PositiveFloat | None = Field(
        default=None, description="Upper bound on the prefill of a batch (time to first token)."
    )
    time_per_output_token_s: PositiveFloat | None = Field(
        default=None, description="Upper bound on the mean decode step (time per output token)."
    )


class Search(PlainPaths):
    tensor: list[Degree] = Field(default_factory=lambda: [1, 2, 4, 8], min_length=1, max_length=limits.MAX_LIST)
    pipeline: list[Degree] = Field(default_factory=lambda: [1], min_length=1, max_length=limits.MAX_LIST)
    batch: list[Annotated[int, Field(ge=1, le=limits.MAX_BATCH)]] = Field(
        default_factory=lambda: list(DEFAULT_BATCHES),
        min_length=1,
        max_length=limits.MAX_LIST,
        description="Requests per replica.",
    )
    dtypes: list[Dtypes] = Field(default_factory=lambda: [Dtypes()], min_length=1, max_length=16)
    max_devices: Annotated[int, Field(ge=1, le=limits.MAX_DEVICES)] | None = Field(
        default=None, description="Configurations that need more devices in all miss this objective."
    )

    @field_validator("tensor", "pipeline", "batch")
    @classmethod
    def _distinct(cls, values: list[int]) -> list[int]:
        if len(set(values)) != len(values):
            raise ValueError("values must be distinct")
        return values


class PlanRequest(PlainPaths):
    model: ModelRef
    hardware: list[HardwareRef] = Field(min_length=1, max_length=16)
    options: Options = Field(
        default_factory=Options, description="Launch overhead and efficiencies, for every profile."
    )
    traffic: Traffic
    objectives: Objectives = Field(default_factory=Objectives)
    search: Search = Field(default_factory=Search)
    prices: dict[Annotated[str, Field(max_length=limits.SLUG_LENGTH)], PositiveFloat] = Field(
        default_factory=dict,
        max_length=16,
        description="Price per device hour by hardware slug; with a price for every profile, the cheapest "
        "configuration ranks first, otherwise the one with the fewest devices.",
    )
    implementation: Implementation = Field(default_factory=lambda: Implementation(decode_samples=64))
    max_results: Annotated[int, Field(ge=1, le=100)] = 10

    # A field validator (hardware comes before search), so that the error names body.search.
    @field_validator("search")
    @classmethod
    def _size(cls, s: Search, info: ValidationInfo) -> Search:
        hardware = len(info.data.get("hardware") or [None])
        points = hardware * len(s.tensor) * len(s.pipeline) * len(s.batch) * len(s.dtypes)
        if points > MAX_CONFIGURATIONS:
            raise ValueError(
                f"the search has {points} configurations (hardware × tensor × pipeline × batch × dtypes); "
                f"at most {MAX_CONFIGURATIONS} are allowed"
            )
        return s


class Objective(StrEnum):
    time_to_first_token_s = "time_to_first_token_s"
    time_per_output_token_s = "time_per_output_token_s"
    memory = "memory"
    max_devices = "max_devices"


class Miss(BaseModel):
    objective: Objective
    target: float
    predicted: float
    ratio: float = Field(description="predicted / target: how far off (> 1).")


class PlanCandidate(BaseModel):
    hardware: str
    tensor: int
    pipeline: int
    batch: int
    dtypes: Dtypes
    devices_per_replica: int
    replicas: int = Field(description="Replicas the traffic needs.")
    devices: int
    time_to_first_token_s: float
    time_per_output_token_s: float | None
    requests_per_s_per_replica: float
    output_tokens_per_s_per_replica: float
    utilisation: float = Field(
        description="Share of the fleet's capacity the traffic uses: demand / (replicas × what one replica serves)."
    )
    batch_fill_s: float = Field(
        description="Time for a replica to receive `batch` requests at its share of the traffic. Batches run back to "
        "back: time_to_first_token_s is the prefill of a full batch and does not include waiting for one to form "
        "(no queueing or continuous batching is modelled); a fill time far above the batch's run time means a "
        "smaller batch serves this traffic as well."
    )
    memory_per_device_bytes: float
    capacity_bytes: float
    fits: bool
    price_per_device_hour: float | None
    cost_per_hour: float | None
    cost_per_million_tokens: float | None = Field(
        description="cost_per_hour over the output tokens the traffic asks for in an hour, × 10⁶ (the fleet is paid "
        "for whole, including capacity the traffic leaves idle)."
    )
    meets: bool
    misses: list[Miss]
    estimate: InferenceRead | None = Field(default=None, description="The replica's whole inference estimate.")


class RankedBy(StrEnum):
    cost = "cost"
    devices = "devices"


class PlanRead(BaseModel):
    feasible: list[PlanCandidate] = Field(description="Configurations that meet every objective, best first.")
    closest: list[PlanCandidate] = Field(
        description="When none meets them: the configurations that miss by the least (the largest predicted / "
        "target ratio over their misses), each with its misses."
    )
    ranked_by: RankedBy
    evaluated: int = Field(description="Configurations estimated.")
    skipped: list[str] = Field(description="Configurations that cannot run, and why (at most 20 listed).")
    skipped_count: int


__all__ = [
    "Miss",
    "Objective",
    "Objectives",
    "PlanCandidate",
    "PlanRead",
    "PlanRequest",
    "RankedBy",
    "Search",
    "Traffic",
]
