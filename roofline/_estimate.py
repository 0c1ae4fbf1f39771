from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]


class Bound(IntEnum):
    compute = 0
    memory = 1
    overhead = 2


@dataclass(frozen=True)
class Estimate:
    """The anatomy of one or many estimates; every array has the same shape (one element per point).

    time_s = Σ over kernels of max(compute_s, memory_s, launch): the roofline lower bound of each kernel, floored by
    its fixed cost (Williams, Waterman, Patterson, CACM 2009; scaling-book "roofline").
    """

    flops: Array
    bytes: Array  # to and from device memory
    compute_s: Array
    memory_s: Array
    overhead_s: Array
    time_s: Array
    peak_flops_per_s: Array  # the peak this op's math runs at (matrix or vector unit)
    bandwidth_bytes_per_s: float
    unit: str  # "matrix" | "vector"
    extra: dict[str, Array] = field(default_factory=dict)  # tiles, waves, wave_efficiency, ideal_bytes …
    assumptions: dict[str, object] = field(default_factory=dict)

    @property
    def arithmetic_intensity(self) -> Array:
        return np.divide(self.flops, self.bytes, out=np.full_like(self.flops, np.inf), where=self.bytes > 0)

    @property
    def critical_intensity(self) -> Array:
        """The ridge point: peak FLOP/s over bandwidth, for the unit and dtype this op runs on."""
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s

    @property
    def bound(self) -> NDArray[np.int64]:
        stacked = np.stack([self.compute_s, self.memory_s, self.overhead_s])
        out: NDArray[np.int64] = np.argmax(stacked, axis=0)
        return out


def kernel_time(compute_s: Array, memory_s: Array, launch_s: float | Array) -> Array:
    """One kernel: the slower of math and memory, never less than its fixed cost."""
    out: Array = np.maximum(np.maximum(compute_s, memory_s), launch_s)
    return out
