"""What an inference estimate holds: each phase's time and per-op breakdown (`PhaseEstimate` of `OpRow`s), the
model's parameters, memory on the busiest device, and the run's totals (`InferenceEstimate`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Rows of the per-op breakdown that are not kernels.
COMMUNICATION = "communication"
PIPELINE_BUBBLE = "pipeline_bubble"


@dataclass(frozen=True)
class OpRow:
    """One row of a phase's breakdown: an op summed over layers (and decode steps), on one device."""

    name: str
    calls: float  # kernels (or collectives) per forward pass
    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    overhead_s: float
    time_s: float
    raw_time_s: float | None = None  # the model's time before a correction (None: no corrector)
    # What corrected it: distinct (label, `roofline.calibration.Method`) over the points the row sums.
    corrections: tuple[tuple[str, int], ...] = ()
    # The time at its ops' prediction bands, summed (None: the run was estimated without an interval table).
    time_s_p10: float | None = None
    time_s_p90: float | None = None

    @property
    def bound(self) -> str:
        if self.name == COMMUNICATION or self.name.endswith(("all_reduce", "all_to_all", "send")):
            return COMMUNICATION
        if self.name == PIPELINE_BUBBLE:
            return "idle"
        terms = {"compute": self.compute_s, "memory": self.memory_s, "overhead": self.overhead_s}
        return max(terms, key=lambda k: terms[k])


@dataclass(frozen=True)
class PhaseEstimate:
    time_s: float
    rows: list[OpRow]
    communication_s: dict[str, float]  # tensor_parallel, pipeline, expert
    raw_time_s: float | None = None  # before corrections (None: no corrector)
    # The phase's time with every op at the lower (upper) edge of its prediction band: the interval of errors that
    # move together (None: estimated without an interval table).
    time_s_p10: float | None = None
    time_s_p90: float | None = None


@dataclass(frozen=True)
class ParameterCount:
    """Parameter counts of the whole model (not per device)."""

    total: float
    embedding: float  # token (and position) tables and an untied LM head
    attention: float
    ffn: float  # dense FFNs, routed and shared experts, routers
    norms: float  # norm scales and shifts
    active_per_token: float  # what one token's forward pass uses (top-k experts)


@dataclass(frozen=True)
class MemoryUse:
    """Bytes on the busiest device."""

    weights_bytes: float
    kv_cache_bytes: float
    activation_bytes: float
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.activation_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


@dataclass(frozen=True)
class InferenceEstimate:
    parameters: ParameterCount
    memory: MemoryUse
    max_batch_that_fits: int
    prefill: PhaseEstimate
    decode: PhaseEstimate
    decode_steps: int
    decode_first_step_s: float | None
    decode_mean_step_s: float | None
    decode_last_step_s: float | None
    output_tokens: int  # per replica
    pipeline_bubble_fraction: float
    assumptions: dict[str, Any]

    @property
    def total_time_s(self) -> float:
        return self.prefill.time_s + self.decode.time_s

    @property
    def total_time_s_band(self) -> tuple[float, float] | None:
        """The run's time with every op at its band's p10 and p90 (None: estimated without an interval table)."""
        pre, dec = self.prefill, self.decode
        if pre.time_s_p10 is None or pre.time_s_p90 is None or dec.time_s_p10 is None or dec.time_s_p90 is None:
            return None
        return pre.time_s_p10 + dec.time_s_p10, pre.time_s_p90 + dec.time_s_p90

    @property
    def decode_mean_step_s_band(self) -> tuple[float, float] | None:
        """The mean decode step at the ops' p10 and p90 (None: no decode steps, or no interval table)."""
        dec = self.decode
        if not self.decode_steps or dec.time_s_p10 is None or dec.time_s_p90 is None:
            return None
        return dec.time_s_p10 / self.decode_steps, dec.time_s_p90 / self.decode_steps

    @property
    def communication_s(self) -> float:
        return sum(self.prefill.communication_s.values()) + sum(self.decode.communication_s.values())
