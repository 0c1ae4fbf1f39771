"""Estimate requests and responses for single ops, lists of ops and sweeps."""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal, get_args

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
from schemas.common import Fraction, InputModel
from schemas.hardware import HardwareCreate
from schemas.ops import Op

MAX_POINTS = limits.MAX_SWEEP_POINTS
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


def _hardware_tag(value: Any) -> str:
    return "profile" if isinstance(value, Mapping | HardwareCreate) else "slug"


# A callable discriminator: an object is validated as a profile only, so its errors are not mixed with
# "Input should be a valid string" from the slug branch.
HardwareRef = Annotated[
    Annotated[str, Field(min_length=1, max_length=limits.SLUG_LENGTH), Tag("slug")]
    | Annotated[HardwareCreate, Tag("profile")],
    Discriminator(_hardware_tag),
    Field(
        description="A catalogue slug (e.g. h100-sxm), or a whole inline profile (the body POST /v1/hardware takes)."
    ),
]
_HARDWARE_TAGS = frozenset({"slug", "profile"})
_OP_KINDS = frozenset(get_args(model.model_fields["kind"].annotation)[0] for model in get_args(get_args(Op)[0]))


def _field_path(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """The path a client wrote: without the union tags pydantic inserts (`op.matmul.m` → `op.m`,
    `ops.0.chain.ops.1.matmul.k` → `ops.0.ops.1.k`, `hardware.profile.memory` → `hardware.memory`)."""
    in_ops = bool(loc) and loc[0] in ("op", "ops", "sweep")
    out: list[int | str] = []
    for i, part in enumerate(loc):
        prev = loc[i - 1] if i else None
        if prev == "hardware" and part in _HARDWARE_TAGS and i == 1:
            continue
        if in_ops and part in _OP_KINDS and (prev == "op" or isinstance(prev, int)):
            continue
        out.append(part)
    return tuple(out)


def _plain_paths(err: ValidationError) -> ValidationError:
    errors: list[InitErrorDetails] = []
    for e in err.errors():
        loc = _field_path(tuple(e["loc"]))
        if e["type"] in ("union_tag_invalid", "union_tag_not_found") and loc and loc[0] in ("op", "ops", "sweep"):
            loc = (*loc, "kind")  # the field at fault is the discriminator
        detail = InitErrorDetails(type=e["type"], loc=loc, input=e["input"])
        if "ctx" in e:
            detail["ctx"] = e["ctx"]
        errors.append(detail)
    try:
        return ValidationError.from_exception_data(err.title, errors)
    except (KeyError, TypeError, ValueError):  # an error type that cannot be rebuilt: keep pydantic's paths
        return err


class Options(InputModel):
    """What-ifs on top of the hardware profile's defaults."""

    launch_overhead_s: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = Field(
        default=None,
        description="Fixed cost per kernel; default the profile's kernel_launch_s (host launch included). For "
        "CUDA-graph replays use the shortest kernel the device runs (~2.5e-6 on an A100); 0 means no floor at all.",
    )
    matmul_efficiency: Fraction | None = None
    vector_efficiency: Fraction | None = None
    memory_efficiency: Fraction | None = None
    cache: Literal["cold", "warm"] = Field(
        default="cold",
        description='"cold" (default): every kernel reads and writes device memory, as in serving, where each layer '
        'brings new weights and activations. "warm": a benchmark\'s steady state, the same call replayed (a '
        "CUDA-graph loop over one op): a kernel whose bytes fit in the last-level cache reads and writes them there, "
        "at the cache's rate (never slower than device memory). Use it to compare with microbenchmarks that do not "
        "flush the cache between runs.",
    )
    calibration: Literal["none", "latest"] | Annotated[int, Field(ge=1, le=2**31 - 1)] = Field(
        default="none",
        description='"none" (the physical model), "latest" (the newest calibration of this hardware profile) or a '
        "calibration id (POST /v1/calibrations). Where the calibration does not reach, the physical model is used "
        "and assumptions.calibration says so.",
    )

    @field_validator("calibration", mode="wrap")
    @classmethod
    def _one_calibration_error(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """One error for the field, not one per branch of its union (`calibration.literal[...]`, `…constrained-int`)."""
        try:
            return handler(value)
        except ValidationError:
            raise ValueError('give "none", "latest" or a calibration id (an integer, at least 1)') from None


class EstimateContext(InputModel):
    hardware: HardwareRef
    hardware_patch: dict[str, Any] | None = Field(
        default=None,
        description="JSON Merge Patch applied to the profile first, e.g. "
        '{"memory": {"device": {"bandwidth_bytes_per_s": 5e12}}} for "an H100 with 5 TB/s".',
    )
    options: Options = Field(default_factory=Options)

    @model_validator(mode="wrap")
    @classmethod
    def _name_fields_as_sent(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(data)
        except ValidationError as err:
            raise _plain_paths(err) from None


class EstimateOpRequest(EstimateContext):
    op: Op


class Sweep(InputModel):
    op: Op = Field(description="The base op; fields named in `vary` are replaced by each value of the grid.")
    vary: dict[
        Annotated[str, Field(max_length=limits.FIELD_PATH_LENGTH)],
        Annotated[list[FiniteFloat], Field(min_length=1, max_length=MAX_POINTS)],
    ] = Field(
        min_length=1,
        max_length=limits.MAX_SWEEP_FIELDS,
        description="Field name → values; the grid is their Cartesian product (at most 100 000 points).",
    )

    @field_validator("vary")
    @classmethod
    def _size(cls, vary: dict[str, list[float]]) -> dict[str, list[float]]:
        points = math.prod(len(values) for values in vary.values())
        if points > MAX_POINTS:
            raise ValueError(f"the grid has {points} points; at most {MAX_POINTS} are allowed")
        return vary


class EstimateOpsRequest(EstimateContext):
    ops: list[Op] | None = Field(default=None, max_length=limits.MAX_OPS, description="Ops estimated one by one.")
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
    time_s_p10: float | None = Field(
        default=None,
        description=(
            "Prediction interval, low end: time_s × the 10th percentile of measured / predicted time over the "
            "leave-one-device-out residuals of this op family and regime (or of the calibration applied); ≤ time_s."
        ),
    )
    time_s_p90: float | None = Field(
        default=None, description="Prediction interval, high end (the 90th percentile likewise); ≥ time_s."
    )
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
