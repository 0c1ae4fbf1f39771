"""Calibrations: corrections fitted from measured timings, per hardware profile and op family; and accuracy reports."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from schemas.benchmarks import TimingScope
from schemas.common import Dtype, InputModel, Slug, UtcDatetime

OpFamily = Annotated[str, StringConstraints(min_length=1, max_length=20, pattern=r"^[a-z_]+$")]


class CalibrationCreate(InputModel):
    kind: Literal["ops", "serving"] = Field(
        default="ops",
        description="ops: corrections per op family from measured timings (/v1/benchmarks); serving: named "
        "corrections of serving estimates (first-token cost, per-iteration host cost, prefill and decode factors) "
        "from measured load tests (/v1/serving-benchmarks), applied by `options.calibration` in /v1/estimate/serving.",
    )
    hardware: Slug
    engine: Annotated[str, StringConstraints(min_length=1, max_length=20, pattern=r"^[a-z_]+$")] | None = Field(
        default=None, description="serving: only load tests of this engine (vllm, sglang, trtllm, emulated, other)."
    )
    model: Slug | None = Field(default=None, description="serving: only load tests of this model.")
    op_families: list[OpFamily] | None = Field(
        default=None,
        min_length=1,
        max_length=20,
        description="Op kinds to fit (matmul, attention, softmax…); default every kind with predicted results.",
    )
    dtype: Dtype | None = Field(default=None, description="Only results in this dtype (each dtype is fitted apart).")
    timing_scope: TimingScope | None = Field(default=None, description="Only results of runs with this scope.")
    software: (
        Annotated[str, StringConstraints(max_length=150, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*(=.+)?$")] | None
    ) = Field(default=None, description="Only runs that list this software (`jax`) or this version (`jax=0.4.35`).")
    since: datetime | None = None
    until: datetime | None = None
    holdout_fraction: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = Field(
        default=0.5, description="Share of the results held out from the fit, at random, to measure it on."
    )
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = Field(default=0, description="Seed of the random split.")

    @model_validator(mode="after")
    def _fields_of_its_kind(self) -> CalibrationCreate:
        """A field of the other kind would be ignored without a word: refused, named."""
        other = ("op_families", "dtype", "timing_scope", "software", "since", "until", "holdout_fraction", "seed")
        wrong = [f for f in (other if self.kind == "serving" else ("engine", "model")) if f in self.model_fields_set]
        if wrong:
            detail = InitErrorDetails(type="value_error", loc=(wrong[0],), input=getattr(self, wrong[0]),
                                      ctx={"error": ValueError(f"does not apply to kind {self.kind}")})  # fmt: skip
            raise ValidationError.from_exception_data("CalibrationCreate", [detail])
        return self


class ErrorStats(BaseModel):
    """Absolute percentage error |predicted / measured − 1| and bias (median signed error: + is too slow)."""

    count: int
    median_ape: float | None
    p90_ape: float | None
    bias: float | None


class CalibrationGroup(BaseModel):
    family: str
    dtype: str
    train: int = Field(description="Results the correction was fitted on.")
    holdout: int = Field(description="Results held out from the fit; `before` and `after` are measured on these.")
    before: ErrorStats = Field(description="The physical model on the held-out results.")
    after: ErrorStats = Field(description="The calibrated model on the held-out results.")
    methods: dict[str, int] = Field(
        description="Held-out results by how their calibrated time was made: interpolated between measured "
        "neighbours, fitted (the size-dependent correction only: no neighbour close enough), or physical."
    )
    launch_s: float = Field(description="Fitted fixed cost per call, seconds (in the data's timing scope).")
    floor_s: float = Field(description="Latency floor: the shortest time measured, seconds.")
    utilisation: list[float] = Field(
        description="Achieved / modelled utilisation u(z) = c0 + c1·z + c2·z², z = log10(work seconds) − centre."
    )
    centre: float
    work_range_s: list[float] = Field(description="Smallest and largest modelled work time fitted on, seconds.")


class CalibrationRead(BaseModel):
    id: int
    hardware: str
    version: int = Field(description="1, 2, … per hardware profile; `latest` is the highest.")
    hardware_version: int = Field(
        description="The profile's version it was fitted on (the results predicted with it); it applies to estimates "
        "only while the profile is at that version."
    )
    op_families: list[str]
    request: dict[str, Any] = Field(description="The filters and split the calibration was fitted with.")
    groups: list[CalibrationGroup]
    before: ErrorStats = Field(description="All held-out results, physical model.")
    after: ErrorStats = Field(description="All held-out results, calibrated.")
    created_at: UtcDatetime


class AccuracyCase(BaseModel):
    result_id: int
    run_id: int
    op: dict[str, Any]
    measured_s: float
    predicted_s: float
    calibrated_s: float | None
    error: float = Field(description="predicted / measured − 1 (raw model).")


class AccuracyGroup(BaseModel):
    hardware: str
    family: str
    dtype: str
    size: str = Field(description="Size bucket: a decade of FLOPs (matrix ops) or of bytes moved (the rest).")
    raw: ErrorStats
    calibrated: ErrorStats = Field(description="Over the results of the group that have a calibrated prediction.")
    worst: list[AccuracyCase]


class ServingAccuracyGroup(BaseModel):
    """Measured load tests (POST /v1/serving-benchmarks) of one hardware profile, engine and model: the error of the
    prediction stored with each, of its mean TTFT, TPOT and end-to-end latency and its output-token throughput."""

    hardware: str
    engine: str
    model: str
    load_tests: int
    ttft: ErrorStats
    tpot: ErrorStats
    e2e: ErrorStats
    output_tokens_per_s: ErrorStats


class AccuracyRead(BaseModel):
    """How far predictions are from measurements, per op family, dtype and size bucket, raw and calibrated.

    A result's calibrated prediction is made by the latest calibration of its hardware; for the results that
    calibration was fitted on, it leaves the result itself out (a leave-one-out value)."""

    results: int
    raw: ErrorStats
    calibrated: ErrorStats
    groups: list[AccuracyGroup]
    worst: list[AccuracyCase]
    serving: list[ServingAccuracyGroup] = Field(
        default_factory=list, description="Measured load tests, their own kind: per hardware, engine and model."
    )


class ServingCalibrationRead(BaseModel):
    """Named corrections of serving estimates, fitted on measured load tests (docs/serving-benchmarks.md)."""

    id: int
    kind: Literal["serving"] = "serving"
    hardware: str
    engine: str | None
    model: str | None
    load_tests: int = Field(description="Load tests it was fitted on.")
    parameters: dict[str, float] = Field(
        description="first_token_s, iteration_host_s (seconds), prefill_factor, decode_factor."
    )
    before: dict[str, ErrorStats] = Field(description="ttft, tpot: the simulation's error on the load tests.")
    after: dict[str, ErrorStats] = Field(
        description="ttft, tpot: the calibrated error, each load test predicted by the fit on the others."
    )
    created_at: UtcDatetime
