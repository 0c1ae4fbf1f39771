"""Interconnect topologies as a collective sees them: a `Link` (bandwidth, per-step latency, how steps add up),
flat fabrics (`Ring`, `Torus` of `Axis`, `Switch`) and two-level `Hierarchical` ones. Sources: the keys of
`roofline.collectives`' docstring."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Timing = Literal["alpha_beta", "per_hop_max", "nccl_protocols"]
# A fabric's class: a scale-up domain (NVLink, NVSwitch, Infinity Fabric, ICI), the host's PCIe (no scale-up fabric),
# or a scale-out network between nodes. Collectives' prediction bands differ by class (docs/model/intervals.md).
FabricClass = Literal["scale_up", "host", "scale_out"]
FABRIC_CLASSES: tuple[FabricClass, ...] = ("scale_up", "host", "scale_out")
TIMINGS = ("alpha_beta", "per_hop_max", "nccl_protocols")


@dataclass(frozen=True)
class Link:
    """One fabric as a device on it sees it, SI units.

    `bandwidth_bytes_per_s` is per direction: per device (all its ports) on a switch, per link on a ring or torus.
    `hop_latency_s` is one step of a collective (one hop, or one handshake with a peer). `efficiency` is the fraction
    of bandwidth large collectives reach; `launch_s` the fixed cost of one collective call.

    `memory_bytes_per_s` (library fabrics only; None: not costed) is the device-memory bandwidth a buffered Simple ring
    copies through. NCCL stages every chunk in a FIFO buffer (without user-buffer registration): in each loop of a ring
    one step per channel copies a chunk between that buffer and the user's buffer without crossing the link (under P2P
    read, NCCL's default on Ampere NVLink per RCCL, the sender's copy into its own buffer; under P2P write, the
    receiver's copy out of it), and a channel's thread block runs its steps in order (NCCL's prims: send, then
    recv-reduce-send …, then recv). Per rank that is one chunk, V/n, read and written: s·(V/n)/M on top of the
    k(n−1)·(V/n)/B the link steps take, s = 3 for an all-gather (the chunk also goes to the output), 2 for
    reduce-scatter and all-reduce (`BUFFER_COPY_STREAMS`); it weighs most on 2 GPUs (k(n−1) = 1 for a gather).
    RL-ASSUME: the copy is not hidden behind the other channels' link steps.

    `timing` says how steps add up:
    - "alpha_beta": T = steps·α + bytes / B (DTB);
    - "per_hop_max": transfers synchronised by the hardware (TPU ICI DMAs), latency and transfer overlap hop by
      hop: T = max(steps·α, bytes / B) (SB-SH: T_hop = max(T_min, bytes / W));
    - "nccl_protocols": a software library (NCCL, RCCL) with two protocols, α-β each, the faster taken: LL (half
      the bytes are payload, α per step) and Simple (full payload, α + `simple_sync_s` per step) (NCCL).
    """

    bandwidth_bytes_per_s: float
    hop_latency_s: float
    efficiency: float = 1.0
    launch_s: float = 0.0
    timing: Timing = "alpha_beta"
    simple_sync_s: float = 0.0
    in_switch_reduction: bool = False
    name: str = "link"
    memory_bytes_per_s: float | None = None
    fabric: FabricClass = "scale_up"  # what kind of fabric it is (`FABRIC_CLASSES`), for the prediction bands

    def __post_init__(self) -> None:
        _positive("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        if self.memory_bytes_per_s is not None:
            _positive("memory_bytes_per_s", self.memory_bytes_per_s)
        _non_negative("hop_latency_s", self.hop_latency_s)
        _non_negative("launch_s", self.launch_s)
        if not 0 < self.efficiency <= 1:
            raise ValueError(f"efficiency must be in (0, 1], got {self.efficiency}")
        _non_negative("simple_sync_s", self.simple_sync_s)
        if self.timing not in TIMINGS:
            raise ValueError(f"unknown timing {self.timing!r}; known: {', '.join(TIMINGS)}")

    @property
    def effective_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s * self.efficiency


@dataclass(frozen=True)
class Ring:
    """`devices` on a physical ring of links (one neighbour each way), used in one direction or both."""

    devices: int
    link: Link
    bidirectional: bool = True

    def __post_init__(self) -> None:
        check_devices("devices", self.devices)


@dataclass(frozen=True)
class Axis:
    size: int
    wraparound: bool = False


@dataclass(frozen=True)
class Torus:
    """A torus (or mesh) of `axes`; the collective runs over the axes listed in `used` (default: all).

    `link` is one link, per direction. An axis with wraparound is a bidirectional ring; without, a line, which
    gives one direction's worth of bandwidth (SB-SH). On TPUs an axis has wraparound only when it is full.
    """

    axes: tuple[Axis, ...]
    link: Link
    used: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.axes:
            raise ValueError("a torus needs at least one axis")
        for i, axis in enumerate(self.axes):
            if axis.size < 1:
                raise ValueError(f"axes[{i}].size must be at least 1")
        if self.used is not None:
            if not self.used or len(set(self.used)) != len(self.used):
                raise ValueError("used axes must be distinct and not empty")
            for i in self.used:
                if not 0 <= i < len(self.axes):
                    raise ValueError(f"used axis {i} does not exist (the torus has {len(self.axes)} axes)")
        if self.devices < 2:
            raise ValueError("the collective must run over at least 2 devices (used axes of size ≥ 2)")

    @property
    def used_axes(self) -> tuple[Axis, ...]:
        picked = range(len(self.axes)) if self.used is None else self.used
        return tuple(self.axes[i] for i in picked if self.axes[i].size > 1)

    @property
    def devices(self) -> int:
        return math.prod(a.size for a in self.used_axes)


@dataclass(frozen=True)
class Switch:
    """`devices` on a switched fabric (NVSwitch, a full mesh): every device sends and receives at its full
    per-device bandwidth to any peers at once."""

    devices: int
    link: Link

    def __post_init__(self) -> None:
        check_devices("devices", self.devices)


Flat = Ring | Torus | Switch


@dataclass(frozen=True)
class Hierarchical:
    """Two levels: `inner` (G devices of one node or pod) and `outer` (N nodes; `outer.link` is each device's own
    share of the scale-out fabric, e.g. one NIC per GPU). Devices = G × N."""

    inner: Flat
    outer: Flat

    @property
    def devices(self) -> int:
        return self.inner.devices * self.outer.devices


Topology = Ring | Torus | Switch | Hierarchical


def fabric_class(topology: Topology) -> FabricClass:
    """The fabric a collective on `topology` is bound by: a two-level topology's outer one (across nodes, or the
    host's PCIe between NVLink pairs), else its link's."""
    if isinstance(topology, Hierarchical):
        outer = topology.outer.link.fabric
        return outer if outer != "scale_up" else "scale_out"
    return topology.link.fabric


def _positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite, got {value}")


def _non_negative(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be non-negative and finite, got {value}")


def check_devices(name: str, value: int) -> None:
    if value < 2:
        raise ValueError(f"{name} must be at least 2 for a collective, got {value}")
