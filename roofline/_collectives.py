"""Collectives on interconnect topologies: an alpha-beta cost (per-step latency + bytes / bandwidth) per algorithm.

Byte convention (nccl-tests, doc/PERFORMANCE.md): `bytes_` is the gathered output for all_gather, the total input of
each rank for reduce_scatter and all_reduce, each rank's whole send buffer for all_to_all (1/n of it to each rank,
itself included), the buffer for broadcast and reduce, and the message for send_recv. algbw = bytes / time;
busbw = algbw × 2(n−1)/n (all_reduce), × (n−1)/n (all_gather, reduce_scatter, all_to_all), × 1 (the others), so that
busbw compares with one device's link bandwidth whatever n is.

Sources cited in the formulas:
- SB-SH: scaling-book, "Sharded Matrices" (collectives on TPU tori: bidirectional wraparound rings, V / W per axis,
  AllReduce = 2 × AllGather, AllToAll = AllGather / 4, per-hop latency T_hop = max(T_min, bytes / W)).
- NCCL-T: nccl-tests doc/PERFORMANCE.md (bus bandwidth factors and ideal times).
- DTB: Distributed Training Book, collective cost model (α-β costs of ring, tree, halving-doubling, hierarchical).
- THAKUR: Thakur, Rabenseifner, Gropp, "Optimization of Collective Communication Operations in MPICH", IJHPCA 2005.
- SB-GPU: scaling-book, "How to Think About GPUs" (NVSwitch collectives, SHARP all-reduce T = V / W).
- NCCL: NVIDIA NCCL's protocols (LL: a 4-byte flag in every 8-byte store, so half the bytes are payload; Simple: full
  payload, a memory fence and a flag per step) and its tuning model (src/graph/tuning.cc). Its per-step latencies
  (`hwLat`, µs, LL/LL128/Simple) put Simple 2.8 µs above LL on an NVLink ring step (3.4 vs 0.6) and 11.3 µs above on
  a network step (14.0 vs 2.7). Checked against NCCL 2.27.3 (the version of aiconfigurator's A100 tables): the
  read-only data of `libnccl.so.2` in the nvidia-nccl-cu12 2.27.3 wheel holds hwLat[NVLink][Ring] = {0.6, 1.9, 3.4},
  hwLat[PCI][Ring] = {1.0, 2.5, 5.7}, hwLat[Net][Ring] = {2.7, 4.0, 14.0}, baseLat[Ring] = {6.6, 14.0, 8.4},
  Ampere llMaxBw = {87.7, 22.5, 19.0} GB/s and 20 GB/s per channel for LL128 rings (float tables found by value in
  the binary, laid out [hardware][algorithm][protocol] as in the source). NCCL 2.29.7's own source (Debian's
  `nvidia-nccl` source package, contrib; `src/graph/tuning.cc`, `ncclTunerConstantsDefaults`) holds the same
  figures. NCCL's model gives a ring on one NVSwitch node the same bus bandwidth (channels × per-channel bandwidth,
  12 × 20 GB/s on an A100: `SM80_NVLINK_BW` in `src/graph/topo.h`) whatever the number of GPUs. Its LL ring reaches
  1/3 of it (1/4 for all-reduce, reduce and across nodes) in NCCL 2.13.4's `tuning.cc` (below). NCCL 2.29.7 instead
  charges `busBw * .5` capped by llMaxBw (87.7 GB/s on one Ampere node). These are selection figures, not
  measurements; the 2.13 fractions are kept because they match NCCL 2.27.3's measured LL rate (`LL_RING_*`). Its
  Simple protocol stages chunks in FIFO buffers, which adds one copy through device memory per ring loop (`Link`).
  Not modelled: LL128, NCCL's third protocol, which 2.29.7 enables on Ampere NVLink (`ncclTopoTuneModel`'s
  `pEnable`). NCCL also picks its protocol by its own model (`topoGetAlgoInfo`, the least modelled time), not by
  the time it will really take, while this module takes the faster of its own LL and Simple costs.
- RCCL: NCCL's device code and tuning model as of NCCL 2.13.4 (`makefiles/version.mk`), in RCCL 5.4.3 (Debian's
  `rccl` source package; AMD's changes marked "Modifications Copyright AMD" and HIP-guarded). Read there: the ring
  kernels (`src/collectives/device/{all_gather,all_reduce,reduce_scatter}.h`, `runRing`), the Simple primitives
  (`prims_simple.h`), P2P read on Ampere NVLink by default (`src/transport/p2p.cc`, `p2pGetInfo`), and the LL
  fractions and the `235.0f` GB/s cap of an sm80 ring (`src/graph/tuning.cc`, `ncclTopoTuneModel`). NCCL 2.29.7's
  ring kernels (`src/device/{all_gather,all_reduce,reduce_scatter}.h`, `runRing`) open their loops with the same
  first steps (`directCopySend` out of place for all-gather, `send` for reduce-scatter, `directSend` for all-reduce).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]

OPS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast", "reduce", "send_recv")
ALGORITHMS = ("auto", "ring", "tree", "halving_doubling", "direct", "hierarchical", "in_switch")
FabricKind = Literal["switch", "torus", "ring", "mesh", "fat_tree", "point_to_point"]
Timing = Literal["alpha_beta", "per_hop_max", "nccl_protocols"]
TIMINGS = ("alpha_beta", "per_hop_max", "nccl_protocols")


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw of `op` on n devices (NCCL-T): 2(n−1)/n for all_reduce, (n−1)/n for all_gather,
    reduce_scatter and all_to_all, 1 for broadcast, reduce and send_recv."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


# A GPU collective library call (NCCL/RCCL): kernel launch, argument set-up and the first handshake. llm-analysis
# floors every intra-node collective at 8 µs (`intra_node_min_message_latency`, gpu_configs/*.json); nccl-tests
# on A100 nodes bottom out at 9-10 µs for one step (aiconfigurator's A100 tables). NCCL's own model puts 6.6 µs
# (LL) and 8.4 µs (Simple) of base latency on a ring (baseLat, above); 8 µs stands for both.
GPU_LIBRARY_LAUNCH_S = 8e-6
# Extra per-step latency of the full-bandwidth ("Simple") protocol over the low-latency one (NCCL's hwLat, above:
# 3.4 − 0.6 µs per NVLink ring step, 14.0 − 2.7 µs per network step).
SIMPLE_SYNC_SCALE_UP_S = 2.8e-6
SIMPLE_SYNC_SCALE_OUT_S = 11.3e-6
LL_PAYLOAD = 0.5  # NCCL LL: 4 bytes of data and a 4-byte flag in each 8-byte store
# What a ring reaches with LL, as a fraction of its Simple bus bandwidth: NCCL's tuning model (src/graph/tuning.cc,
# the "model refinements" of ncclTopoTuneModel: busBw × 1/3, × 1/4 for all-reduce and reduce and on more than one
# node, capped by llMaxBw, 87.7 GB/s on one Ampere node, which an A100 ring (≤ 235 GB/s / 3) never reaches). Below
# the half payload, the receiving threads poll every 8-byte line for its flag. Measured: aiconfigurator's 2-GPU
# all-reduce (NCCL 2.27.3) from 256 to 512 KiB adds 4.1 µs per 256 KiB, 64 GB/s of bus bandwidth against 235/4 = 59.
# The fractions are NCCL 2.13.4's; NCCL 2.29.7's tuning.cc charges busBw × .5 capped by llMaxBw (87.7 GB/s), further
# from those 64 GB/s, so the older figures stay.
LL_RING_BUS_FRACTION = 1 / 3
LL_RING_REDUCE_BUS_FRACTION = 1 / 4
# The step of each ring loop that does not cross the link (Link.memory_bytes_per_s): one chunk moved between the
# user's buffers and the send FIFO, as streams of V/n through device memory per rank. NCCL's ring kernels (RCCL,
# above: `runRing`) open every loop with that step: an out-of-place all-gather with `directCopySend` (reads the input
# chunk, writes it to the rank's own slot of the output and to the send buffer: 3 streams), reduce-scatter and
# all-reduce with `send` (reads the input chunk, writes the send buffer: 2). Measured (aiconfigurator, NCCL 2.27.3,
# 512 MiB): the time beyond the link steps is 1.4-1.5 times larger for all-gather than for reduce-scatter on 2, 4
# and 8 GPUs, as 3 : 2.
BUFFER_COPY_STREAMS = {"all_gather": 3, "reduce_scatter": 2, "all_reduce": 2}
BUFFER_COPY = "buffer copy"


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
        _devices("devices", self.devices)


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
        _devices("devices", self.devices)


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
        out: Array = np.sum([p.bytes_per_link for p in self.phases if p.name != BUFFER_COPY], axis=0)
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


def _positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite, got {value}")


def _non_negative(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be non-negative and finite, got {value}")


def _devices(name: str, value: int) -> None:
    if value < 2:
        raise ValueError(f"{name} must be at least 2 for a collective, got {value}")


# --- schedules: (phase name, link, steps, bytes on the busiest link per direction) per algorithm ------------------

_Step = tuple[str, Link, int, Array]


def _log2(n: int) -> int:
    return max(1, math.ceil(math.log2(n)))


def _ring_a2a_load(n: int, bidirectional: bool) -> float:
    """Bytes on the busiest link (per direction) of a ring all-to-all, per byte of each rank's send buffer: rank r
    sends 1/n to r + k, k hops away. One direction: Σₖ k/n = (n−1)/2. Both ways, each piece takes the shorter way
    (the antipodal one split): n/8 for even n, (n²−1)/(8n) for odd n (SB-SH's AllToAll = AllGather/4, exactly)."""
    if not bidirectional:
        return (n - 1) / 2
    return n / 8 if n % 2 == 0 else (n * n - 1) / (8 * n)


def _ring_schedule(op: str, v: Array, n: int, link: Link, bidirectional: bool, where: str = "") -> list[_Step]:
    """A logical ring over n devices whose links (one per direction, or a switch port) run at `link` (DTB, THAKUR;
    SB-SH for the bidirectional ring: each half of the data goes round one way)."""
    dirs = 2 if bidirectional else 1
    sweep = math.ceil((n - 1) / dirs)  # hops until every shard has reached every device
    shard = (n - 1) / n / dirs * v
    if op in ("all_gather", "reduce_scatter"):
        return [(op + where, link, sweep, shard)]
    if op == "all_reduce":
        return [("reduce_scatter" + where, link, sweep, shard), ("all_gather" + where, link, sweep, shard)]
    if op == "all_to_all":
        return [(op + where, link, n // 2 if bidirectional else n - 1, _ring_a2a_load(n, bidirectional) * v)]
    if op in ("broadcast", "reduce"):  # pipelined along the ring: every link carries the buffer once
        return [(op + where, link, sweep, v / dirs)]
    return [(op + where, link, 1, v)]  # send_recv between neighbours


def _buffer_copy(op: str, v: Array, n: int, link: Link) -> list[_Step]:
    """The step of a buffered library ring that stays in device memory: one chunk (V/n) per rank read and written,
    `BUFFER_COPY_STREAMS[op]` streams of it (Link.memory_bytes_per_s); costed for the Simple protocol only (LL's own
    figure already holds its copies)."""
    if link.timing != "nccl_protocols" or link.memory_bytes_per_s is None:
        return []
    if op not in BUFFER_COPY_STREAMS:
        return []
    memory = Link(link.memory_bytes_per_s / BUFFER_COPY_STREAMS[op], 0.0, name="device memory")
    return [(BUFFER_COPY, memory, 0, v / n)]


def _torus_schedule(op: str, v: Array, t: Torus) -> list[_Step]:
    """Rings along every used axis at once (SB-SH). A wraparound axis is a bidirectional ring (2 links into each
    chip), a line gives one direction's worth (1): gathers take (N−1)/N · V / (W · Σ dirs), → V / (W_bidi · axes)
    for k wraparound axes; the latency floor is one hop per step to the farthest chip, Σ ⌊k/2⌋ (wraparound) or k−1."""
    axes = t.used_axes
    n = t.devices
    dirs = sum(2 if a.wraparound else 1 for a in axes)
    hops = sum(a.size // 2 if a.wraparound else a.size - 1 for a in axes)
    link = t.link
    gather = (n - 1) / n / dirs * v
    if op in ("all_gather", "reduce_scatter"):
        return [(op, link, hops, gather)]
    if op == "all_reduce":  # reduce-scatter then all-gather: 2 × all-gather (SB-SH)
        return [("reduce_scatter", link, hops, gather), ("all_gather", link, hops, gather)]
    if op == "all_to_all":
        # Dimension-ordered: along axis i every chip moves, per byte of its buffer, the load of a ring all-to-all
        # over that axis; the axes run at once, the busiest one sets the time.
        load = max(_ring_a2a_load(a.size, a.wraparound) for a in axes)
        return [(op, link, hops, load * v)]
    if op in ("broadcast", "reduce"):  # pipelined over every link out of (into) the root
        return [(op, link, hops, v / dirs)]
    return [(op, link, 1, v)]  # send_recv between neighbours


def _switch_schedule(op: str, algorithm: str, v: Array, n: int, link: Link) -> list[list[_Step]]:
    """Alternatives of one algorithm on a switch (each device sends and receives `link` bandwidth at once)."""
    frac = (n - 1) / n * v
    if algorithm == "ring":
        return [_ring_schedule(op, v, n, link, bidirectional=False) + _buffer_copy(op, v, n, link)]
    if algorithm == "direct":
        # Every device writes to (reads from) all peers at once: one step per exchange (TensorRT-LLM/vLLM custom
        # all-reduce: one-shot reads all n−1 peers' buffers, two-shot is a direct reduce-scatter + all-gather).
        if op in ("all_gather", "reduce_scatter"):
            return [[(op, link, 1, frac)]]
        if op == "all_reduce":
            two_shot = [("reduce_scatter", link, 1, frac), ("all_gather", link, 1, frac)]
            return [[("one_shot", link, 1, (n - 1) * v)], two_shot]
        if op == "all_to_all":  # pairwise exchanges, one handshake per peer (DTB: (P−1)·α)
            return [[(op, link, n - 1, frac)]]
        if op in ("broadcast", "reduce"):  # the root sends (receives) the whole buffer to (from) every peer
            return [[(op, link, 1, (n - 1) * v)]]
        return [[(op, link, 1, v)]]
    if algorithm == "tree":
        # Pipelined (double) binary trees: a reduce up and a broadcast down, ⌈log2 n⌉ steps each; each device
        # sends and receives about the whole buffer per direction (DTB; NCCL-T's lower bound V/B for a broadcast).
        depth = _log2(n)
        if op == "all_reduce":
            return [[("reduce", link, depth, v), ("broadcast", link, depth, v)]]
        if op in ("broadcast", "reduce"):
            return [[(op, link, depth, v)]]
        return []
    if algorithm == "halving_doubling":
        if n & (n - 1):
            return []
        depth = _log2(n)  # log2 n exchanges with partners at distance n/2, n/4, … (THAKUR)
        if op in ("all_gather", "reduce_scatter"):
            return [[(op, link, depth, frac)]]
        if op == "all_reduce":  # Rabenseifner: reduce-scatter by halving, all-gather by doubling
            return [[("reduce_scatter", link, depth, frac), ("all_gather", link, depth, frac)]]
        if op in ("broadcast", "reduce"):  # scatter + all-gather (van de Geijn), or reduce-scatter + gather
            first, second = ("scatter", "all_gather") if op == "broadcast" else ("reduce_scatter", "gather")
            return [[(first, link, depth, frac), (second, link, depth, frac)]]
        return []
    if algorithm == "in_switch" and link.in_switch_reduction:
        # The switch reduces and multicasts (NVLS, SHARP): each device sends its buffer once and receives the
        # result once, V/W instead of 2(n−1)/n·V/W for all-reduce (SB-GPU; measured gain ~1.3×, not 2×).
        if op == "all_reduce":  # up to the switch and back down run in opposite directions of the port at once
            return [[("reduce_and_multicast", link, 2, v)]]
        if op in ("all_gather", "reduce_scatter"):
            return [[(op, link, 1, frac)]]
        if op in ("broadcast", "reduce"):
            return [[(op, link, 1, v)]]
        return []
    return []


def _flat_schedules(op: str, algorithm: str, v: Array, topo: Flat, where: str = "") -> list[list[_Step]]:
    if isinstance(topo, Switch):
        found = _switch_schedule(op, algorithm, v, topo.devices, topo.link)
        return [[(name + where, link, steps, b) for name, link, steps, b in s] for s in found]
    if algorithm != "ring":
        return []
    if isinstance(topo, Ring):
        return [_ring_schedule(op, v, topo.devices, topo.link, topo.bidirectional, where)]
    return [[(name + where, link, steps, b) for name, link, steps, b in _torus_schedule(op, v, topo)]]


def _slowest(a: Link, b: Link, bandwidth: float, name: str) -> Link:
    """One link standing for a path through both levels: the worse latency and sync, the given bandwidth."""
    timing: Timing = "alpha_beta"
    for t in ("nccl_protocols", "per_hop_max"):
        if t in (a.timing, b.timing):
            timing = t
            break
    return Link(
        bandwidth_bytes_per_s=bandwidth, hop_latency_s=max(a.hop_latency_s, b.hop_latency_s), efficiency=1.0,
        launch_s=max(a.launch_s, b.launch_s), timing=timing, simple_sync_s=max(a.simple_sync_s, b.simple_sync_s),
        name=name,
    )  # fmt: skip


def _hierarchical_schedules(op: str, algorithm: str, v: Array, h: Hierarchical) -> list[list[_Step]]:
    g, nodes = h.inner.devices, h.outer.devices
    inner = " within nodes"
    outer = " across nodes"
    if algorithm == "hierarchical":

        def level(sub_op: str, size: Array, topo: Flat, where: str) -> list[_Step]:
            return _flat_schedules(sub_op, "ring", size, topo, where)[0]

        # Reduce-scatter inside the node, the collective on 1/G of the data across nodes (each device over its own
        # share of the scale-out fabric), all-gather inside the node (DTB's hierarchical all-reduce).
        if op == "all_reduce":
            return [
                level("reduce_scatter", v, h.inner, inner) + level("all_reduce", v / g, h.outer, outer)
                + level("all_gather", v, h.inner, inner)
            ]  # fmt: skip
        if op == "reduce_scatter":
            return [level("reduce_scatter", v, h.inner, inner) + level("reduce_scatter", v / g, h.outer, outer)]
        if op == "all_gather":
            return [level("all_gather", v / g, h.outer, outer) + level("all_gather", v, h.inner, inner)]
        if op == "all_to_all":
            # Shuffle inside the node so that each device holds what its peer rail sends to every other node,
            # then exchange across nodes: (G−1)/G of the buffer inside, (N−1)/N across.
            inside = [(op + inner, h.inner.link, g - 1, (g - 1) / g * v)] if g > 1 else []
            return [[*inside, (op + outer, h.outer.link, nodes - 1, (nodes - 1) / nodes * v)]]
        if op == "broadcast":
            return [level("broadcast", v, h.outer, outer) + level("broadcast", v, h.inner, inner)]
        if op == "reduce":
            return [level("reduce", v, h.inner, inner) + level("reduce", v, h.outer, outer)]
        return [[(op + outer, h.outer.link, 1, v)]]  # send_recv between devices of two nodes
    if algorithm == "ring":
        # One flat ring through every device: each step waits for the slower level. A node's G devices each drive
        # their own scale-out share, so the rings crossing nodes run at min(inner, G × outer) per device.
        bw = min(h.inner.link.effective_bytes_per_s, g * h.outer.link.effective_bytes_per_s)
        link = _slowest(h.inner.link, h.outer.link, bw, f"{h.inner.link.name} + {h.outer.link.name}")
        if op == "send_recv":
            return [[(op + outer, h.outer.link, 1, v)]]
        copy = replace(link, memory_bytes_per_s=h.inner.link.memory_bytes_per_s or h.outer.link.memory_bytes_per_s)
        return [_ring_schedule(op, v, g * nodes, link, bidirectional=False) + _buffer_copy(op, v, g * nodes, copy)]
    return []


_FORMULAS = {
    ("ring", "all_gather"): "(n−1)·α + (n−1)/n·V/B",
    ("ring", "reduce_scatter"): "(n−1)·α + (n−1)/n·V/B",
    ("ring", "all_reduce"): "2(n−1)·α + 2(n−1)/n·V/B (reduce-scatter + all-gather)",
    ("ring", "all_to_all"): "(n−1)·α + (n−1)/2·V/B (piece k goes k hops)",
    ("ring", "broadcast"): "(n−1)·α + V/B (pipelined)",
    ("ring", "reduce"): "(n−1)·α + V/B (pipelined)",
    ("ring", "send_recv"): "α + V/B",
    ("direct", "all_gather"): "α + (n−1)/n·V/B",
    ("direct", "reduce_scatter"): "α + (n−1)/n·V/B",
    ("direct", "all_reduce"): "min(α + (n−1)·V/B one-shot, 2α + 2(n−1)/n·V/B two-shot)",
    ("direct", "all_to_all"): "(n−1)·α + (n−1)/n·V/B",
    ("direct", "broadcast"): "α + (n−1)·V/B",
    ("direct", "reduce"): "α + (n−1)·V/B",
    ("direct", "send_recv"): "α + V/B",
    ("tree", "all_reduce"): "2⌈log2 n⌉·α + 2·V/B (pipelined binary trees)",
    ("tree", "broadcast"): "⌈log2 n⌉·α + V/B",
    ("tree", "reduce"): "⌈log2 n⌉·α + V/B",
    ("halving_doubling", "all_gather"): "log2 n·α + (n−1)/n·V/B",
    ("halving_doubling", "reduce_scatter"): "log2 n·α + (n−1)/n·V/B",
    ("halving_doubling", "all_reduce"): "2·log2 n·α + 2(n−1)/n·V/B",
    ("halving_doubling", "broadcast"): "2·log2 n·α + 2(n−1)/n·V/B (scatter + all-gather)",
    ("halving_doubling", "reduce"): "2·log2 n·α + 2(n−1)/n·V/B (reduce-scatter + gather)",
    ("in_switch", "all_reduce"): "2α + V/B (the switch reduces and multicasts)",
    ("in_switch", "all_gather"): "α + (n−1)/n·V/B (multicast)",
    ("in_switch", "reduce_scatter"): "α + (n−1)/n·V/B (in-switch reduction)",
    ("in_switch", "broadcast"): "α + V/B (multicast)",
    ("in_switch", "reduce"): "α + V/B",
}
_SOURCES = {
    "ring": "DTB; THAKUR; NCCL-T (PERFORMANCE.md)",
    "direct": "DTB (pairwise); TensorRT-LLM custom all-reduce (one-shot, two-shot)",
    "tree": "DTB; NCCL-T",
    "halving_doubling": "THAKUR (Rabenseifner; recursive halving-doubling); DTB",
    "in_switch": "SB-GPU (SHARP / NVLS all-reduce T = V/W)",
    "hierarchical": "DTB (hierarchical all-reduce: RS inside, AR across, AG inside)",
}


def _formula(topo: Topology, algorithm: str, op: str) -> tuple[str, str]:
    if isinstance(topo, Torus):
        return (
            {
                "all_gather": "max(Σ hops·α, (N−1)/N·V/(W·Σ dirs)); W_bidi = 2W on a wraparound axis",
                "reduce_scatter": "max(Σ hops·α, (N−1)/N·V/(W·Σ dirs)); W_bidi = 2W on a wraparound axis",
                "all_reduce": "2 × all_gather (reduce-scatter + all-gather)",
                "all_to_all": "max(Σ hops·α, max over axes of ring all-to-all load·V/W) = all_gather/4 when wrapped",
                "broadcast": "max(Σ hops·α, V/(W·Σ dirs))",
                "reduce": "max(Σ hops·α, V/(W·Σ dirs))",
                "send_recv": "max(α, V/W)",
            }[op],
            "SB-SH (collectives on a TPU torus)",
        )
    if isinstance(topo, Ring) and topo.bidirectional and op in ("all_gather", "reduce_scatter", "all_reduce"):
        base = _FORMULAS[("ring", op)].replace("V/B", "V/(2B)").replace("(n−1)·α", "⌈(n−1)/2⌉·α")
        return base + " (both directions: half the bandwidth term)", "SB-SH; DTB"
    if algorithm == "hierarchical":
        return {
            "all_reduce": "RS_inner(V) + AR_outer(V/G) + AG_inner(V)",
            "reduce_scatter": "RS_inner(V) + RS_outer(V/G)",
            "all_gather": "AG_outer(V/G) + AG_inner(V)",
            "all_to_all": "(G−1)·α + (G−1)/G·V/B_inner + (N−1)·α' + (N−1)/N·V/B_outer",
            "broadcast": "broadcast_outer(V) + broadcast_inner(V)",
            "reduce": "reduce_inner(V) + reduce_outer(V)",
            "send_recv": "α' + V/B_outer",
        }[op], _SOURCES["hierarchical"]
    if isinstance(topo, Hierarchical):  # flat ring over both levels
        return _FORMULAS[("ring", op)] + ", B = min(B_inner, G·B_outer)", _SOURCES["ring"]
    return _FORMULAS[(algorithm, op)], _SOURCES[algorithm]


def _links(topo: Topology) -> list[Link]:
    if isinstance(topo, Hierarchical):
        return [topo.inner.link, topo.outer.link]
    return [topo.link]


def _protocols(topo: Topology) -> list[str]:
    timings = {link.timing for link in _links(topo)}
    if "nccl_protocols" in timings:
        return ["ll", "simple"]
    return ["hardware"] if timings == {"per_hop_max"} else ["alpha_beta"]


def _ll_payload(op: str, algorithm: str, topo: Topology) -> float:
    """The fraction of a link's bandwidth LL reaches: NCCL's ring figures for the ring collectives a library runs
    (1/3; 1/4 for all-reduce and reduce, and across nodes), LL's half payload for everything else."""
    if algorithm not in ("ring", "hierarchical") or op in ("all_to_all", "send_recv"):
        return LL_PAYLOAD
    if op in ("all_reduce", "reduce") or isinstance(topo, Hierarchical):
        return LL_RING_REDUCE_BUS_FRACTION
    return LL_RING_BUS_FRACTION


def _cost(
    steps_list: list[_Step], protocol: str, ll_payload: float = LL_PAYLOAD
) -> tuple[tuple[Phase, ...], Array, Array, Array]:
    phases: list[Phase] = []
    latency: Array = np.zeros(np.shape(steps_list[0][3]))
    bandwidth = np.zeros_like(latency)
    total = np.zeros_like(latency)
    for name, link, steps, link_bytes in steps_list:
        if name == BUFFER_COPY and protocol != "simple":
            continue
        b = np.asarray(link_bytes, dtype=np.float64)
        if link.timing == "per_hop_max":  # hardware-synchronised: each hop is latency- or bandwidth-bound (SB-SH)
            lat = np.full_like(b, steps * link.hop_latency_s)
            bw = b / link.effective_bytes_per_s
            t = np.maximum(lat, bw)
        else:
            payload, sync = 1.0, 0.0
            if link.timing == "nccl_protocols":
                payload, sync = (ll_payload, 0.0) if protocol == "ll" else (1.0, link.simple_sync_s)
            lat = np.full_like(b, steps * (link.hop_latency_s + sync))
            bw = b / (link.effective_bytes_per_s * payload)
            t = lat + bw
        phases.append(Phase(name, link.name, steps, b, lat, bw, t))
        latency = latency + lat
        bandwidth = bandwidth + bw
        total = total + t
    return tuple(phases), latency, bandwidth, total


def _candidates(op: str, algorithm: str, v: Array, topo: Topology) -> list[Candidate]:
    if isinstance(topo, Hierarchical):
        schedules = _hierarchical_schedules(op, algorithm, v, topo)
    else:
        schedules = _flat_schedules(op, algorithm, v, topo)
    launch = max(link.launch_s for link in _links(topo))
    formula, source = _formula(topo, algorithm, op) if schedules else ("", "")
    out = []
    for schedule in schedules:
        for protocol in _protocols(topo):
            phases, lat, bw, t = _cost(schedule, protocol, _ll_payload(op, algorithm, topo))
            out.append(Candidate(algorithm, protocol, formula, source, phases, launch, launch + t, launch + lat, bw))
    return out


# What a GPU collective library runs on one switched node (NCCL 2.27.3's algorithms: Tree, Ring, CollNetDirect,
# CollNetChain, NVLS, NVLSTree, PAT). Inside one node NCCL's tree is a chain (no fewer steps than the ring), PAT
# serves one GPU per node, and all-to-all and send/recv are grouped point-to-point transfers: so `auto` picks among
# ring, NVLS (in_switch, where the switch reduces) and point-to-point ("direct") for all_to_all and send_recv. The
# one-shot/two-shot kernels of TensorRT-LLM and vLLM ("direct" all-reduce), trees and halving-doubling stay
# available by name.
_LIBRARY_AUTO = ("ring", "in_switch")
_POINT_TO_POINT = ("all_to_all", "send_recv")


def _algorithms_for(topo: Topology, op: str | None = None) -> tuple[str, ...]:
    if isinstance(topo, Switch):
        if op is not None and topo.link.timing == "nccl_protocols":
            return ("direct",) if op in _POINT_TO_POINT else _LIBRARY_AUTO
        return ("ring", "direct", "tree", "halving_doubling", "in_switch")
    if isinstance(topo, Hierarchical):
        return ("hierarchical", "ring")
    return ("ring",)


def collective(
    op: str, bytes_: float | Sequence[float] | Array, topology: Topology, algorithm: str = "auto"
) -> CollectiveEstimate:
    """Time of collective `op` on `bytes_` (nccl-tests convention, see the module docstring) over `topology`.

    `bytes_` is a number or an array of any shape (all results take its shape). `algorithm` is one of
    ring, tree, halving_doubling, direct, hierarchical, in_switch, or auto: the fastest that applies, per size, of
    those the fabric runs (on a switch costed as a GPU collective library, NCCL's: ring, in-switch reduction where
    the switch reduces, point-to-point for all_to_all and send_recv).
    Raises ValueError naming the problem for an unknown op or algorithm, an algorithm the topology cannot run
    (halving-doubling on a non-power of two, in-switch reduction without it), or non-positive bytes.
    """
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    v = np.asarray(bytes_, dtype=np.float64)
    if not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ValueError("bytes must be positive and finite")
    names = _algorithms_for(topology, op) if algorithm == "auto" else (algorithm,)
    candidates = [c for name in names for c in _candidates(op, name, v, topology)]
    if not candidates:
        raise ValueError(_why_not(op, algorithm, topology))
    times = np.stack([np.broadcast_to(c.time_s, v.shape) for c in candidates])
    choice = np.argmin(times, axis=0).astype(np.int64)

    def pick(values: list[Array]) -> Array:
        stacked = np.stack([np.broadcast_to(x, v.shape) for x in values])
        out: Array = np.take_along_axis(stacked, choice[np.newaxis, ...], axis=0)[0]
        return out

    time_s = pick([c.time_s for c in candidates])
    latency_s = pick([c.latency_s for c in candidates])
    bandwidth_s = pick([c.bandwidth_s for c in candidates])
    n = topology.devices
    algbw = v / time_s
    return CollectiveEstimate(
        op=op,
        devices=n,
        bytes=v,
        time_s=time_s,
        latency_s=latency_s,
        bandwidth_s=bandwidth_s,
        algbw_bytes_per_s=algbw,
        busbw_bytes_per_s=algbw * bus_factor(op, n),
        bytes_per_link=pick([c.bytes_per_link for c in candidates]),
        steps=np.asarray([c.steps for c in candidates], dtype=np.int64)[choice],
        algorithm=np.asarray([c.algorithm for c in candidates])[choice],
        protocol=np.asarray([c.protocol for c in candidates])[choice],
        bound=np.where(latency_s > bandwidth_s, "latency", "bandwidth"),
        choice=choice,
        candidates=tuple(candidates),
    )


def _why_not(op: str, algorithm: str, topo: Topology) -> str:
    kind = type(topo).__name__.lower()
    if algorithm == "halving_doubling" and isinstance(topo, Switch) and topo.devices & (topo.devices - 1):
        return f"halving_doubling needs a power-of-two number of devices, got {topo.devices}"
    if algorithm == "in_switch" and isinstance(topo, Switch) and not topo.link.in_switch_reduction:
        return "in_switch needs a switch that reduces (in_switch_reduction: NVLS / SHARP)"
    supported = _algorithms_for(topo)
    if algorithm not in supported:
        return f"a {kind} topology runs {', '.join(supported)}, not {algorithm}"
    return f"{algorithm} does not implement {op} on a {kind} topology"


# --- a device's own fabric ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fabric:
    """A hardware profile's interconnect level, as the catalogue states it (schemas.hardware.Link), SI units."""

    kind: FabricKind
    bandwidth_per_direction_bytes_per_s: float
    hop_latency_s: float
    name: str = "fabric"
    link_bandwidth_per_direction_bytes_per_s: float | None = None
    domain_devices: int | None = None
    torus_dims: tuple[int, ...] | None = None
    wraparound_axis_multiple: int | None = None


def _library_link(f: Fabric, bandwidth: float, efficiency: float, scale_out: bool, memory: float | None) -> Link:
    sync = SIMPLE_SYNC_SCALE_OUT_S if scale_out else SIMPLE_SYNC_SCALE_UP_S
    return Link(
        bandwidth, f.hop_latency_s, efficiency, GPU_LIBRARY_LAUNCH_S, "nccl_protocols", sync, name=f.name,
        memory_bytes_per_s=memory,
    )  # fmt: skip


def _torus_axes(devices: int, dims: tuple[int, ...], multiple: int) -> tuple[Axis, ...]:
    """A slice of `devices` chips: fill the axes in order, each with the largest divisor that fits, so whole axes
    (which have wraparound) come first. An axis wraps when its size is a multiple of `multiple`."""
    axes, left = [], devices
    for dim in dims:
        size = max(d for d in range(1, min(dim, left) + 1) if left % d == 0)
        if size > 1:
            axes.append(Axis(size, size % multiple == 0))
        left //= size
    if left != 1:
        raise ValueError(f"{devices} devices do not form a slice of a {'x'.join(map(str, dims))} torus")
    return tuple(axes)


def _level(
    f: Fabric, devices: int, efficiency: float, launch_s: float, scale_out: bool, memory: float | None = None
) -> Flat:
    if f.kind == "torus":
        if f.torus_dims is None or f.wraparound_axis_multiple is None:
            raise ValueError(f"{f.name}: a torus needs torus_dims and wraparound_axis_multiple")
        per_link = f.link_bandwidth_per_direction_bytes_per_s or f.bandwidth_per_direction_bytes_per_s
        link = Link(per_link, f.hop_latency_s, efficiency, launch_s, "per_hop_max", name=f.name)
        return Torus(_torus_axes(devices, f.torus_dims, f.wraparound_axis_multiple), link)
    if f.kind == "ring":
        per_link = f.link_bandwidth_per_direction_bytes_per_s or f.bandwidth_per_direction_bytes_per_s / 2
        return Ring(devices, Link(per_link, f.hop_latency_s, efficiency, launch_s, "per_hop_max", name=f.name))
    bandwidth = f.bandwidth_per_direction_bytes_per_s
    if f.kind == "mesh" and f.domain_devices and f.domain_devices > 2:
        # A full mesh splits a device's bandwidth over its peers; only links to participants carry data.
        bandwidth *= min(1.0, (devices - 1) / (f.domain_devices - 1))
    return Switch(devices, _library_link(f, bandwidth, efficiency, scale_out, memory))


def device_topology(
    devices: int,
    scale_up: Fabric | None,
    scale_out: Fabric | None = None,
    *,
    efficiency: float = 1.0,
    launch_s: float = 0.0,
    memory_bytes_per_s: float | None = None,
) -> Topology:
    """The topology `devices` devices of one hardware profile use for a collective.

    Up to the scale-up domain (NVLink/NVSwitch, Infinity Fabric, TPU ICI) the collective stays on it; beyond, the
    devices form nodes (or pods) of `domain_devices` joined by `scale_out`, a two-level hierarchy. Switched and mesh
    fabrics are costed as a GPU collective library (`GPU_LIBRARY_LAUNCH_S` per call, LL/Simple protocols); tori and
    rings as hardware-synchronised transfers with `launch_s` (the device's kernel launch) per call. `efficiency` is
    the profile's interconnect efficiency. `memory_bytes_per_s` (the device's memory bandwidth × its memory
    efficiency) costs the buffered Simple ring's copy through device memory on library fabrics (`Link`); None leaves
    it out. Raises ValueError when the devices do not fit the profile's fabrics.
    """
    _devices("devices", devices)
    if scale_up is None:
        if scale_out is None:
            raise ValueError("the profile has no interconnect for a collective")
        return _level(scale_out, devices, efficiency, launch_s, True, memory_bytes_per_s)
    domain = scale_up.domain_devices or devices
    if scale_up.kind == "torus" and scale_up.torus_dims:
        domain = min(domain, math.prod(scale_up.torus_dims))
    if devices <= domain:
        return _level(scale_up, devices, efficiency, launch_s, False, memory_bytes_per_s)
    if scale_out is None:
        raise ValueError(f"{devices} devices exceed the {domain}-device {scale_up.name} domain and the profile has "
                         "no scale-out fabric")  # fmt: skip
    if devices % domain:
        raise ValueError(f"{devices} devices are not whole nodes of {domain} ({scale_up.name})")
    inner = _level(scale_up, domain, efficiency, launch_s, False, memory_bytes_per_s)
    outer = _level(scale_out, devices // domain, efficiency, launch_s, True, memory_bytes_per_s)
    return Hierarchical(inner, outer)


def with_link(topology: Topology, **changes: object) -> Topology:
    """The same topology with fields of every link replaced (e.g. `efficiency=0.7`, `launch_s=2.5e-6`)."""
    if isinstance(topology, Hierarchical):
        return Hierarchical(_flat_with_link(topology.inner, changes), _flat_with_link(topology.outer, changes))
    return _flat_with_link(topology, changes)


def _flat_with_link(topology: Flat, changes: dict[str, object]) -> Flat:
    return replace(topology, link=replace(topology.link, **changes))  # type: ignore[arg-type]
