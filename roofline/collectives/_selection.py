"""Choosing and timing a collective: the candidates (algorithm × protocol) a topology runs, costed at every size,
the fastest taken per size under `algorithm="auto"`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from roofline._num import Array
from roofline.collectives._protocols import cost, links, ll_payload, protocols
from roofline.collectives._results import Candidate, CollectiveEstimate
from roofline.collectives._schedules import describe, flat_schedules, hierarchical_schedules
from roofline.collectives._topology import Hierarchical, Switch, Topology

OPS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast", "reduce", "send_recv")
ALGORITHMS = ("auto", "ring", "tree", "halving_doubling", "direct", "hierarchical", "in_switch")


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw of `op` on n devices (NCCL-T): 2(n−1)/n for all_reduce, (n−1)/n for all_gather,
    reduce_scatter and all_to_all, 1 for broadcast, reduce and send_recv."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def _candidates(op: str, algorithm: str, v: Array, topo: Topology) -> list[Candidate]:
    if isinstance(topo, Hierarchical):
        schedules = hierarchical_schedules(op, algorithm, v, topo)
    else:
        schedules = flat_schedules(op, algorithm, v, topo)
    launch = max(link.launch_s for link in links(topo))
    formula, source = describe(topo, algorithm, op) if schedules else ("", "")
    out = []
    for schedule in schedules:
        for protocol in protocols(topo):
            phases, lat, bw, t = cost(schedule, protocol, ll_payload(op, algorithm, topo))
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
