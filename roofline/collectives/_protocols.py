"""NCCL's protocols as this package costs them: LL (half the bytes are payload, low latency) and Simple (full
payload, a fence and a flag per step), each an α-β cost, the faster taken; and the fixed cost of a library call.

NCCL: NVIDIA NCCL's protocols (LL: a 4-byte flag in every 8-byte store, so half the bytes are payload; Simple: full
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

RCCL: NCCL's device code and tuning model as of NCCL 2.13.4 (`makefiles/version.mk`), in RCCL 5.4.3 (Debian's
`rccl` source package; AMD's changes marked "Modifications Copyright AMD" and HIP-guarded). Read there: the ring
kernels (`src/collectives/device/{all_gather,all_reduce,reduce_scatter}.h`, `runRing`), the Simple primitives
(`prims_simple.h`), P2P read on Ampere NVLink by default (`src/transport/p2p.cc`, `p2pGetInfo`), and the LL
fractions and the `235.0f` GB/s cap of an sm80 ring (`src/graph/tuning.cc`, `ncclTopoTuneModel`). NCCL 2.29.7's
ring kernels (`src/device/{all_gather,all_reduce,reduce_scatter}.h`, `runRing`) open their loops with the same
first steps (`directCopySend` out of place for all-gather, `send` for reduce-scatter, `directSend` for all-reduce).
"""

from __future__ import annotations

import numpy as np

from roofline._num import Array
from roofline.collectives._results import Phase
from roofline.collectives._schedules import BUFFER_COPY, Step
from roofline.collectives._topology import Hierarchical, Link, Topology

# A GPU collective library call (NCCL/RCCL): kernel launch, argument set-up and the first handshake. llm-analysis
# floors every intra-node collective at 8 µs (`intra_node_min_message_latency`, gpu_configs/*.json). NCCL's own
# model puts 6.6 µs (LL) and 8.4 µs (Simple) of base latency on a ring (baseLat, above); 8 µs stands for both.
GPU_LIBRARY_LAUNCH_S = 8e-6
# Extra per-step latency of the full-bandwidth ("Simple") protocol over the low-latency one (NCCL's hwLat, above:
# 3.4 − 0.6 µs per NVLink ring step, 14.0 − 2.7 µs per network step).
SIMPLE_SYNC_SCALE_UP_S = 2.8e-6
SIMPLE_SYNC_SCALE_OUT_S = 11.3e-6
LL_PAYLOAD = 0.5  # NCCL LL: 4 bytes of data and a 4-byte flag in each 8-byte store
# What a ring reaches with LL, as a fraction of its Simple bus bandwidth: NCCL's tuning model (src/graph/tuning.cc,
# the "model refinements" of ncclTopoTuneModel: busBw × 1/3, × 1/4 for all-reduce and reduce and on more than one
# node, capped by llMaxBw, 87.7 GB/s on one Ampere node, which an A100 ring (≤ 235 GB/s / 3) never reaches). Below
# the half payload, the receiving threads poll every 8-byte line for its flag. The fractions are NCCL 2.13.4's (RCCL,
# above); NCCL 2.29.7's tuning.cc charges busBw × .5 capped by llMaxBw (87.7 GB/s) instead (why the older figures
# stay: docs/model/collectives.md).
LL_RING_BUS_FRACTION = 1 / 3
LL_RING_REDUCE_BUS_FRACTION = 1 / 4


def links(topo: Topology) -> list[Link]:
    if isinstance(topo, Hierarchical):
        return [topo.inner.link, topo.outer.link]
    return [topo.link]


def protocols(topo: Topology) -> list[str]:
    timings = {link.timing for link in links(topo)}
    if "nccl_protocols" in timings:
        return ["ll", "simple"]
    return ["hardware"] if timings == {"per_hop_max"} else ["alpha_beta"]


def ll_payload(op: str, algorithm: str, topo: Topology) -> float:
    """The fraction of a link's bandwidth LL reaches: NCCL's ring figures for the ring collectives a library runs
    (1/3; 1/4 for all-reduce and reduce, and across nodes), LL's half payload for everything else."""
    if algorithm not in ("ring", "hierarchical") or op in ("all_to_all", "send_recv"):
        return LL_PAYLOAD
    if op in ("all_reduce", "reduce") or isinstance(topo, Hierarchical):
        return LL_RING_REDUCE_BUS_FRACTION
    return LL_RING_BUS_FRACTION


def cost(
    steps_list: list[Step], protocol: str, ll_payload: float = LL_PAYLOAD
) -> tuple[tuple[Phase, ...], Array, Array, Array]:
    phases: list[Phase] = []
    latency: Array = np.zeros(np.shape(steps_list[0][3]))
    bandwidth = np.zeros_like(latency)
    total = np.zeros_like(latency)
    for name, link, steps, link_bytes in steps_list:
        if name.startswith(BUFFER_COPY) and protocol != "simple":  # a level's copy too ("buffer copy within nodes")
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
