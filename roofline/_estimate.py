from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
from numpy.typing import NDArray

from roofline import _num
from roofline._num import Array, Num

__all__ = ["Array", "Bound", "Estimate", "Num", "kernel_time"]


class Bound(IntEnum):
    compute = 0
    memory = 1
    overhead = 2


@dataclass(frozen=True)
class Estimate:
    """The anatomy of one or many estimates; every array has the same shape (one element per point), and one point
    computed from plain numbers holds floats (`roofline._num`).

    time_s = Σ over kernels of launch + max(‖compute_s, memory_s‖₃, compute_s + exposed): each kernel's fixed
    cost, then the roofline of its work (Williams, Waterman, Patterson, CACM 2009; scaling-book "roofline") with a
    smooth transition at the ridge point and the waits of a tiled kernel (`kernel_time`).
    """

    flops: Num
    bytes: Num  # to and from device memory
    compute_s: Num
    memory_s: Num
    overhead_s: Num
    time_s: Num
    peak_flops_per_s: Num  # the peak this op's math runs at (matrix or vector unit)
    bandwidth_bytes_per_s: float
    unit: str  # "matrix" | "vector"
    extra: dict[str, Num] = field(default_factory=dict)  # tiles, waves, wave_efficiency, ideal_bytes …
    assumptions: dict[str, object] = field(default_factory=dict)

    @property
    def arithmetic_intensity(self) -> Num:
        if isinstance(self.flops, float) and isinstance(self.bytes, float):
            return self.flops / self.bytes if self.bytes > 0 else math.inf
        out: Array = np.divide(self.flops, self.bytes, out=np.full_like(self.flops, np.inf), where=self.bytes > 0)
        return out

    @property
    def critical_intensity(self) -> Num:
        """The ridge point: peak FLOP/s over bandwidth, for the unit and dtype this op runs on."""
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s

    @property
    def bound(self) -> int | NDArray[np.int64]:
        """Which term is largest: a `Bound` (the first of equals), per point."""
        terms = (self.compute_s, self.memory_s, self.overhead_s)
        if all(isinstance(t, float) for t in terms):
            return max(range(3), key=lambda i: (terms[i], -i))
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


def kernel_time(
    compute_s: Num, memory_s: Num, launch_s: Num, exposed_s: Num = 0.0, overlap_norm: float | None = None
) -> Num:
    """One kernel, in seconds: its fixed cost (launch and ramp: scheduling its blocks, filling and draining its
    pipeline, which nothing overlaps), then its work: the smooth maximum of math and memory time
    (`OVERLAP_NORM`), never less than the compute units' own timeline, math plus the waits a tiled kernel cannot
    hide (`exposed_s`, e.g. `roofline.ops.K_STEP`).

    The fixed cost is the profile's `kernel_launch_s` unless the caller gives its own (e.g. ~2.5 µs, the shortest
    kernel an A100 runs, for CUDA-graph replays that have no host launch gap).
    """
    c, m = _num.num(compute_s), _num.num(memory_s)
    top = _num.maximum(c, m)
    safe = _num.where(top > 0, top, 1.0)
    p = OVERLAP_NORM if overlap_norm is None else overlap_norm
    work = top * ((c / safe) ** p + (m / safe) ** p) ** (1.0 / p)
    return launch_s + _num.maximum(work, c + exposed_s)
