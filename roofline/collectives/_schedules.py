"""Schedules: the steps each algorithm takes on each topology (phase name, link, latency steps, bytes on the busiest
link per direction), and the formula and source each one is reported with. Sources: the keys of
`roofline.collectives`' docstring."""

from __future__ import annotations

import math
from dataclasses import replace

from roofline._num import Array
from roofline.collectives._topology import Flat, Hierarchical, Link, Ring, Switch, Timing, Topology, Torus

# The step of each ring loop that does not cross the link (Link.memory_bytes_per_s): one chunk moved between the
# user's buffers and the send FIFO, as streams of V/n through device memory per rank. NCCL's ring kernels (RCCL, in
# `_protocols`' docstring: `runRing`) open every loop with that step: an out-of-place all-gather with `directCopySend`
# (reads the input chunk, writes it to the rank's own slot of the output and to the send buffer: 3 streams),
# reduce-scatter and all-reduce with `send` (reads the input chunk, writes the send buffer: 2).
BUFFER_COPY_STREAMS = {"all_gather": 3, "reduce_scatter": 2, "all_reduce": 2}
BUFFER_COPY = "buffer copy"

Step = tuple[str, Link, int, Array]


def _log2(n: int) -> int:
    return max(1, math.ceil(math.log2(n)))


def _ring_a2a_load(n: int, bidirectional: bool) -> float:
    """Bytes on the busiest link (per direction) of a ring all-to-all, per byte of each rank's send buffer: rank r
    sends 1/n to r + k, k hops away. One direction: Σₖ k/n = (n−1)/2. Both ways, each piece takes the shorter way
    (the antipodal one split): n/8 for even n, (n²−1)/(8n) for odd n (SB-SH's AllToAll = AllGather/4, exactly)."""
    if not bidirectional:
        return (n - 1) / 2
    return n / 8 if n % 2 == 0 else (n * n - 1) / (8 * n)


def _ring_schedule(op: str, v: Array, n: int, link: Link, bidirectional: bool, where: str = "") -> list[Step]:
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


def _a2a_channel_load(n: int, link: Link) -> float:
    """Per byte of each rank's send buffer, what a direct all-to-all over a switch costs at the link's rate.

    (n−1)/n in general: each device sends all but its own 1/n to its peers at once. A GPU library on a scale-up
    fabric moves its own 1/n through its channels as well: nccl-tests' alltoall (and PyTorch's all_to_all_single)
    posts a send and a receive for every rank, itself included, NCCL runs them as n rounds of its point-to-point
    schedule, the self round a copy by the channels' threads (NCCL 2.29.7 `src/enqueue.cc` `addP2pToPlan`,
    `selfSend`; `src/device/sendrecv.h`, `isCopy`), and gives every round the same number of channels
    (`nChannelsMin` halved while nChannelsMin · nRanks > p2pnChannels). On NVLink the channels, not the link, set
    the rate (NCCL's topology search provisions channels of `bwIntra` each until they add up to the NVLink
    bandwidth, `src/graph/search.cc`), so each round moves its 1/n at 1/n of that rate and the self round takes as
    long as a peer's: the call costs the whole buffer, V/B, whatever n. Over the host's PCIe the link is the
    bottleneck and a channel's copy into its own memory is not: (n−1)/n."""
    if link.timing == "nccl_protocols" and link.fabric == "scale_up":
        return 1.0
    return (n - 1) / n


def _buffer_copy(op: str, v: Array, n: int, link: Link) -> list[Step]:
    """The step of a buffered library ring that stays in device memory: one chunk (V/n) per rank read and written,
    `BUFFER_COPY_STREAMS[op]` streams of it (Link.memory_bytes_per_s); costed for the Simple protocol only (LL's own
    figure already holds its copies)."""
    if link.timing != "nccl_protocols" or link.memory_bytes_per_s is None:
        return []
    if op not in BUFFER_COPY_STREAMS:
        return []
    memory = Link(link.memory_bytes_per_s / BUFFER_COPY_STREAMS[op], 0.0, name="device memory")
    return [(BUFFER_COPY, memory, 0, v / n)]


def _torus_schedule(op: str, v: Array, t: Torus) -> list[Step]:
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


def _switch_schedule(op: str, algorithm: str, v: Array, n: int, link: Link) -> list[list[Step]]:
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
            return [[(op, link, n - 1, _a2a_channel_load(n, link) * v)]]
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


def flat_schedules(op: str, algorithm: str, v: Array, topo: Flat, where: str = "") -> list[list[Step]]:
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


def hierarchical_schedules(op: str, algorithm: str, v: Array, h: Hierarchical) -> list[list[Step]]:
    g, nodes = h.inner.devices, h.outer.devices
    inner = " within nodes"
    outer = " across nodes"
    if algorithm == "hierarchical":

        def level(sub_op: str, size: Array, topo: Flat, where: str) -> list[Step]:
            return flat_schedules(sub_op, "ring", size, topo, where)[0]

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
    ("direct", "all_to_all"): "(n−1)·α + (n−1)/n·V/B; V/B for a GPU library on NVLink (its self round)",
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


def describe(topo: Topology, algorithm: str, op: str) -> tuple[str, str]:
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
