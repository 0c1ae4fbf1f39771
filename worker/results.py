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

__all__ = ["Measurement", "RunInfo", "TimingScope", "host_overhead_s", "run_payload", "validate_op"]


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
    host_overhead_s: float | None = None  # the per-call host cost of wall-clock results (`host_overhead_s`)


def host_overhead_s(probe: Stats) -> float:
    """A run's per-call host cost from its dispatch probe (`worker.suites.matmul.dispatch_probe`): the probe's
    median less its kernel, which is the shortest a device runs (`adapters.KERNEL_FLOOR_S`, the kernel-scope
    floor the service predicts it at); never below zero."""
    from adapters import KERNEL_FLOOR_S

    return max(0.0, probe.median_s - KERNEL_FLOOR_S)


def run_payload(info: RunInfo, scope: TimingScope, results: list[dict[str, Any]]) -> dict[str, Any]:
    """A `POST /v1/benchmarks` body, checked against schemas.benchmarks.BenchmarkRunCreate."""
    payload: dict[str, Any] = {
        "hardware": info.hardware,
        "host": info.host,
        "software": info.software,
        "timing_scope": str(scope),
        "results": results,
    }
    if scope is TimingScope.wall_clock and info.host_overhead_s is not None:
        payload["host_overhead_s"] = info.host_overhead_s
    BenchmarkRunCreate.model_validate(payload)
    return payload
