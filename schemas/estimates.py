"""Estimate requests and responses for single ops, lists of ops and sweeps."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, Field, model_validator

from schemas.common import Fraction, InputModel
from schemas.hardware import HardwareCreate
from schemas.ops import Op

MAX_POINTS = 100_000
HardwareRef = Annotated[
    str | HardwareCreate,
    Field(
        description="A catalogue slug (e.g. h100-sxm), or a whole inline profile (the body POST /v1/hardware takes)."
    ),
]


class Options(InputModel):
    """What-ifs on top of the hardware profile's defaults."""

    launch_overhead_s: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = Field(
        default=None,
        description="Fixed cost per kernel; default the profile's kernel_launch_s. 0 for CUDA-graph replays.",
    )
    matmul_efficiency: Fraction | None = None
    vector_efficiency: Fraction | None = None
    memory_efficiency: Fraction | None = None


class EstimateContext(InputModel):
    hardware: HardwareRef
    hardware_patch: dict[str, Any] | None = Field(
        default=None,
        description="JSON Merge Patch applied to the profile first, e.g. "
        '{"memory": {"device": {"bandwidth_bytes_per_s": 5e12}}} for "an H100 with 5 TB/s".',
    )
    options: Options = Field(default_factory=Options)


class EstimateOpRequest(EstimateContext):
    op: Op


class Sweep(InputModel):
    op: Op = Field(description="The base op; fields named in `vary` are replaced by each value of the grid.")
    vary: dict[str, list[float]] = Field(
        min_length=1,
        max_length=6,
        description="Field name → values; the grid is their Cartesian product (at most 100 000 points).",
    )

    @model_validator(mode="after")
    def _size(self) -> Sweep:
        points = 1
        for name, values in self.vary.items():
            if not values:
                raise ValueError(f"vary.{name}: give at least one value")
            points *= len(values)
        if points > MAX_POINTS:
            raise ValueError(f"vary: the grid has {points} points; at most {MAX_POINTS} are allowed")
        return self


class EstimateOpsRequest(EstimateContext):
    ops: list[Op] | None = Field(default=None, max_length=10_000, description="Ops estimated one by one.")
    sweep: Sweep | None = None

    @model_validator(mode="after")
    def _one_of(self) -> EstimateOpsRequest:
        if (self.ops is None) == (self.sweep is None):
            raise ValueError("give exactly one of `ops` and `sweep`")
        return self


class Bound(StrEnum):
    compute = "compute"
    memory = "memory"
    overhead = "overhead"


class EstimateRead(BaseModel):
    """The anatomy of one estimate. Times in seconds, bytes to and from device memory."""

    time_s: float
    flops: float
    bytes: float
    arithmetic_intensity: float = Field(description="FLOPs per byte of device-memory traffic.")
    critical_intensity: float = Field(
        description="The hardware's ridge point for this dtype and unit: peak / bandwidth."
    )
    compute_time_s: float
    memory_time_s: float
    overhead_s: float
    bound: Bound
    unit: str = Field(description="matrix or vector: the unit whose peak the math runs at.")
    peak_flops_per_s: float
    achieved_flops_per_s: float
    tiles: float | None = None
    waves: float | None = None
    wave_efficiency: float | None = None
    tile: list[int] | None = None
    details: dict[str, float] = Field(default_factory=dict)
    assumptions: dict[str, Any] = Field(default_factory=dict)


class EstimateOpsRead(BaseModel):
    items: list[EstimateRead]
    grid: dict[str, list[float]] | None = Field(
        default=None, description="For a sweep: each varied field's value at every point, in item order."
    )


__all__ = [
    "MAX_POINTS",
    "Bound",
    "EstimateOpRequest",
    "EstimateOpsRead",
    "EstimateOpsRequest",
    "EstimateRead",
    "Options",
    "Sweep",
]
