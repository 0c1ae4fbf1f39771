"""What a collective estimate holds: the costed phases of a schedule, every candidate (algorithm and protocol)
considered, and the one chosen per size."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from roofline._num import Array
from roofline.collectives._schedules import BUFFER_COPY


@dataclass(frozen=True)
class Phase:
    """One stage of a collective's schedule: `steps` latency steps moving `bytes_per_link` on the busiest link."""

    name: str
    fabric: str
    steps: int
    bytes_per_link: Array
    latency_s: Array
    bandwidth_s: Array
    time_s: Array


@dataclass(frozen=True)
class Candidate:
    """One algorithm with one protocol, evaluated at every size."""

    algorithm: str
    protocol: str
    formula: str
    source: str
    phases: tuple[Phase, ...]
    launch_s: float
    time_s: Array
    latency_s: Array
    bandwidth_s: Array

    @property
    def steps(self) -> int:
        return sum(p.steps for p in self.phases)

    @property
    def bytes_per_link(self) -> Array:
        out: Array = np.sum([p.bytes_per_link for p in self.phases if not p.name.startswith(BUFFER_COPY)], axis=0)
        return out


@dataclass(frozen=True)
class CollectiveEstimate:
    """The cost of one collective at one or many sizes; arrays have the shape of `bytes`.

    `time_s` = `latency_s` + `bandwidth_s` for library fabrics (α-β), max per hop for hardware-synchronised ones;
    `bound` says which term is larger. `candidates` holds every algorithm and protocol considered, `choice` the index
    of the one used at each size (the fastest, under `algorithm="auto"`).
    """

    op: str
    devices: int
    bytes: Array
    time_s: Array
    latency_s: Array
    bandwidth_s: Array
    algbw_bytes_per_s: Array
    busbw_bytes_per_s: Array
    bytes_per_link: Array
    steps: NDArray[np.int64]
    algorithm: NDArray[np.str_]
    protocol: NDArray[np.str_]
    bound: NDArray[np.str_]
    choice: NDArray[np.int64]
    candidates: tuple[Candidate, ...] = field(repr=False)

    def chosen(self, index: int = 0) -> Candidate:
        """The candidate used at flat position `index` (0 for a scalar size)."""
        return self.candidates[int(self.choice.ravel()[index])]

    @property
    def formula(self) -> str:
        return "; ".join(dict.fromkeys(self.candidates[int(i)].formula for i in np.unique(self.choice)))

    @property
    def source(self) -> str:
        return "; ".join(dict.fromkeys(self.candidates[int(i)].source for i in np.unique(self.choice)))
