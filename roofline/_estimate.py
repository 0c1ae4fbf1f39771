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

    time_s = Σ over kernels of launch + max(‖compute_s, memory_s‖₃, compute_s + exposed): each kernel's fixed
    cost, then the roofline of its work (Williams, Waterman, Patterson, CACM 2009; scaling-book "roofline") with a
    smooth transition at the ridge point and the waits of a tiled kernel (`kernel_time`).
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


# How far math and memory traffic overlap inside one kernel. max(compute, memory) (p → ∞) is the roofline's ideal
# of perfect overlap, the sum (p = 1) the no-overlap upper bound (scaling-book, "roofline"). Near the ridge point a
# real kernel is neither: its software pipeline hides loads behind math only a few stages deep, and the first loads
# and the last stores of each tile are exposed, so it runs below both roofs. The p-norm with p = 3 is that smooth
# transition: 26 % above max() at the ridge, under 4 % once one term is twice the other. (Measured: A100 bf16
# GEMMs near the ridge, bench/validate.py.)
OVERLAP_NORM = 3.0


def kernel_time(compute_s: Array, memory_s: Array, launch_s: float | Array, exposed_s: float | Array = 0.0) -> Array:
    """One kernel, in seconds: its fixed cost (launch and ramp: scheduling its blocks, filling and draining its
    pipeline, which nothing overlaps), then its work: the smooth maximum of math and memory time
    (`OVERLAP_NORM`), never less than the compute units' own timeline, math plus the waits a tiled kernel cannot
    hide (`exposed_s`, e.g. `roofline._ops.K_STEP`).

    The fixed cost is the profile's `kernel_launch_s` unless the caller gives its own (e.g. ~2.5 µs, the shortest
    kernel an A100 runs, for CUDA-graph replays that have no host launch gap).
    """
    c, m = np.asarray(compute_s, dtype=np.float64), np.asarray(memory_s, dtype=np.float64)
    top = np.maximum(c, m)
    safe = np.where(top > 0, top, 1.0)
    p = OVERLAP_NORM
    work = top * ((c / safe) ** p + (m / safe) ** p) ** (1.0 / p)
    out: Array = launch_s + np.maximum(work, c + exposed_s)
    return out
