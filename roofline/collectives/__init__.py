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
- NCCL, RCCL: NCCL's protocols, tuning model and ring kernels, read in its own source and in RCCL's copy of it
  (`_protocols` names the versions, files and figures).
"""

from roofline.collectives._device import Fabric, FabricKind, device_topology, with_link
from roofline.collectives._protocols import (
    GPU_LIBRARY_LAUNCH_S,
    LL_PAYLOAD,
    LL_RING_BUS_FRACTION,
    LL_RING_REDUCE_BUS_FRACTION,
    SIMPLE_SYNC_SCALE_OUT_S,
    SIMPLE_SYNC_SCALE_UP_S,
)
from roofline.collectives._results import Candidate, CollectiveEstimate, Phase
from roofline.collectives._schedules import BUFFER_COPY_STREAMS
from roofline.collectives._selection import ALGORITHMS, OPS, bus_factor, collective
from roofline.collectives._topology import (
    FABRIC_CLASSES,
    TIMINGS,
    Axis,
    FabricClass,
    Flat,
    Hierarchical,
    Link,
    Ring,
    Switch,
    Timing,
    Topology,
    Torus,
    fabric_class,
)

__all__ = [
    "ALGORITHMS",
    "BUFFER_COPY_STREAMS",
    "FABRIC_CLASSES",
    "GPU_LIBRARY_LAUNCH_S",
    "LL_PAYLOAD",
    "LL_RING_BUS_FRACTION",
    "LL_RING_REDUCE_BUS_FRACTION",
    "OPS",
    "SIMPLE_SYNC_SCALE_OUT_S",
    "SIMPLE_SYNC_SCALE_UP_S",
    "TIMINGS",
    "Axis",
    "Candidate",
    "CollectiveEstimate",
    "Fabric",
    "FabricClass",
    "FabricKind",
    "Flat",
    "Hierarchical",
    "Link",
    "Phase",
    "Ring",
    "Switch",
    "Timing",
    "Topology",
    "Torus",
    "bus_factor",
    "collective",
    "device_topology",
    "fabric_class",
    "with_link",
]
