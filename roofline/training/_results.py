"""What a training-step estimate answers: the step's anatomy, its communication, its memory and its rates."""

from __future__ import annotations

from dataclasses import dataclass

from roofline.training._memory import TrainingMemory
from roofline.training._ops import OpCost

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class CommunicationRow:
    """One collective of the step: `calls` per step on the busiest device, `bytes` per call (nccl-tests convention,
    `roofline.collective`), its whole time and the part not hidden under computation."""

    name: str
    op: str
    devices: int
    bytes: float
    calls: float
    time_s: float
    exposed_s: float


@dataclass(frozen=True)
class OpRow:
    """One op of the step on the busiest device: seconds per step forward, backward and recomputed."""

    name: str
    kind: str
    count: float  # per micro-batch (layers of the stage, or 1 for the head)
    forward_s: float
    backward_s: float
    recompute_s: float
    cost: OpCost


@dataclass(frozen=True)
class TrainingEstimate:
    """One optimizer step. Times in seconds on the busiest device (the last pipeline stage, which also runs the
    LM head); FLOPs over all devices. MFU counts the model's FLOPs (forward and backward, no recomputation), HFU
    the FLOPs the devices run (recomputation included), both over the devices' peak at the matmul dtype."""

    step_s: float
    forward_s: float
    backward_s: float
    recompute_s: float
    optimizer_s: float
    bubble_s: float
    communication_exposed_s: float
    micro_batches: int
    tokens_per_step: float
    model_flops: float
    hardware_flops: float
    peak_flops_per_s: float
    devices: int
    ops: tuple[OpRow, ...]
    communication: tuple[CommunicationRow, ...]
    memory: TrainingMemory
    max_micro_batch: int
    power_w: float | None = None
    # The step with every op at its band's lower (upper) edge (`roofline.intervals`; None without a table).
    step_s_p10: float | None = None
    step_s_p90: float | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.step_s * self.devices * self.peak_flops_per_s)

    @property
    def hfu(self) -> float:
        return self.hardware_flops / (self.step_s * self.devices * self.peak_flops_per_s)

    def time_to_train_s(self, tokens: float) -> float:
        """Seconds to train on `tokens` tokens at this step's rate."""
        return tokens / self.tokens_per_s

    def device_hours(self, tokens: float) -> float:
        return self.time_to_train_s(tokens) * self.devices / SECONDS_PER_HOUR

    def cost(self, tokens: float, price_per_device_hour: float) -> float:
        """Cost of training on `tokens` tokens at `price_per_device_hour` (any currency)."""
        return self.device_hours(tokens) * price_per_device_hour

    def energy_j(self, tokens: float) -> float | None:
        """Joules at the devices' board power (None when the system states none)."""
        return None if self.power_w is None else self.time_to_train_s(tokens) * self.devices * self.power_w
