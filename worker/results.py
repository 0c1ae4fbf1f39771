"""A measured result and its op object, validated with the service's own schemas before it leaves the host."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import TypeAdapter

from schemas.benchmarks import BenchmarkRunCreate, Collective, TimingScope, TrainingStep
from schemas.ops import Op
from worker.timing import Stats

__all__ = ["Measurement", "RunInfo", "TimingScope", "run_payload", "validate_op"]


@cache
def _op_adapter() -> TypeAdapter[Any]:
    return TypeAdapter(Op)


def validate_op(op: dict[str, Any]) -> dict[str, Any]:
    """The op as `/v1/estimate/op` takes it (schemas.ops.Op), or a collective or a training step
    (schemas.benchmarks.Collective, TrainingStep); raises pydantic.ValidationError otherwise. Returns the normalised
    JSON form (defaults filled in)."""
    if op.get("kind") == "collective":
        return Collective.model_validate(op).model_dump(mode="json")
    if op.get("kind") == "training_step":
        return TrainingStep.model_validate(op).model_dump(mode="json")
    model = _op_adapter().validate_python(op)
    dumped: dict[str, Any] = _op_adapter().dump_python(model, mode="json")
    return dumped


@dataclass(frozen=True)
class Measurement:
    """One op and its timing, with the suite and name that produced it (kept locally, not uploaded)."""

    suite: str
    name: str
    op: dict[str, Any]
    stats: Stats
    timing_scope: TimingScope = TimingScope.wall_clock
    notes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        s = self.stats
        for value in (s.median_s, s.p10_s, s.p90_s):
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{self.name}: timings must be positive and finite, got {s}")
        if not s.p10_s <= s.median_s <= s.p90_s:
            raise ValueError(f"{self.name}: p10 ≤ median ≤ p90 does not hold: {s}")

    def result(self) -> dict[str, Any]:
        """The result object of `POST /v1/benchmarks`."""
        return {
            "op": self.op,
            "median_s": self.stats.median_s,
            "p10_s": self.stats.p10_s,
            "p90_s": self.stats.p90_s,
            "repeats": self.stats.repeats,
        }

    def record(self) -> dict[str, Any]:
        """A line of the local results file: the uploaded result plus where it came from."""
        return {"suite": self.suite, "name": self.name, "timing_scope": str(self.timing_scope), **self.result()} | (
            {"notes": self.notes} if self.notes else {}
        )


@dataclass(frozen=True)
class RunInfo:
    """What every batch of a run carries besides its results."""

    hardware: str  # a catalogue slug, or the device description for the service to map
    host: str
    software: dict[str, str]


def run_payload(info: RunInfo, scope: TimingScope, results: list[dict[str, Any]]) -> dict[str, Any]:
    """A `POST /v1/benchmarks` body, checked against schemas.benchmarks.BenchmarkRunCreate."""
    payload = {
        "hardware": info.hardware,
        "host": info.host,
        "software": info.software,
        "timing_scope": str(scope),
        "results": results,
    }
    BenchmarkRunCreate.model_validate(payload)
    return payload
