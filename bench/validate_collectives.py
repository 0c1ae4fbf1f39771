"""Ridgeline's collective model against collectives measured on real A100s and TPU7x (issue 5's accuracy report).

    .venv/bin/python -m bench.validate_collectives [--data PATH] [--json PATH]

Loads the measured tables in the repository's `validation/` folder, predicts each row with
`roofline.collective` on the topology the measurement ran on (built from the `a100-sxm-80gb` catalogue profile by
`adapters.device_topology`, or stated below where the catalogue has no such machine), and prints
per dataset, op, device count and size bucket: the number of points, the median and p90 absolute percentage error,
the bias (median signed error: + means Ridgeline predicts slower than measured), and the small-message floor
(the 10th percentile of predicted over that of measured times of messages up to 64 KiB, where bandwidth does not
matter).

The data and their licences (see `validation/README.md` and each source's README):
- aiconfigurator-a100 (NVIDIA ai-dynamo/aiconfigurator @095f58a5, Apache-2.0): NCCL 2.27.3 all_gather,
  reduce_scatter, all_reduce, alltoall on 2/4/8 GPUs of one 8-GPU NVSwitch node, nccl-tests convention, message
  sizes in elements (× 2 bytes for half, × 1 for int8); TensorRT-LLM's own all-reduce (`custom_allreduce_perf.csv`).
- vidur (microsoft/vidur @7d475133, MIT): torch.distributed all_reduce and send_recv on an A100 DGX (1 and 2 nodes)
  and on A100 PCIe machines with NVLink between pairs of GPUs; sizes in bytes.
- llmcompass-a100 (PrincetonUniversity/LLMCompass @2e015fd2, BSD-3-Clause): all-reduce on 4 A100s over NVLink.
- tpu7x (AI-Hypercomputer/accelerator-microbenchmarks @36fc5e66, Apache-2.0): JAX all_gather on 2x2x1 and 2x2x2
  TPU7x slices.

What each measurement ran, and so the algorithm predicted (never a per-shape fit):
- NCCL runs rings for all_gather, reduce_scatter and all_reduce inside a node (A100 has no NVLS) and its
  all-to-all as concurrent point-to-point exchanges ("direct"); across nodes the ring goes through every GPU.
- TensorRT-LLM's all-reduce runs its own one-shot/two-shot kernel ("direct") for small messages and hands larger
  ones to NCCL: its table matches NCCL's row for row from 2 MiB on, so rows of 2 MiB and more are NCCL's ring.
  Its kernels are timed in CUDA-graph replays, so their fixed cost is the shortest kernel there (2.5 µs,
  bench/validate.py's KERNEL_FLOOR_S), not an NCCL call.
- Machines that are not in the catalogue are stated here, each figure with its source:
  DGX A100 scale-out: 8 × 200 Gb/s HDR InfiniBand per node, 25 GB/s per GPU per direction (NVIDIA DGX A100
  datasheet; aiconfigurator's system_a100_sxm.yaml `inter_node_bw: 25e9`), 5 µs per network step (as the
  catalogue's H100/B200 InfiniBand). A100 PCIe pairs: NVLink bridge 300 GB/s per direction (NVIDIA A100 PCIe
  datasheet, "600 GB/s" bidirectional; not retrieved in HARDWARE_SOURCES, an assumption), PCIe Gen4 x16 between the
  pairs (31.5 GB/s per direction, the a100-pcie-80gb profile), one x16 path's worth per pair (through the host
  bridge), the GPUs' memory from the a100-pcie-80gb profile. TPU7x: 100 GB/s per ICI link per direction (1200 GBps
  bidirectional per chip over 6 links, Google Cloud TPU7x docs) of which 90 % is reached (scaling-book's newest
  per-link figure for the v5p and v6e links Google also rates at 100 GB/s is 9e10, "TPU ICI links have slightly
  different bandwidths depending on the operation"; HARDWARE_SOURCES §8.5), 1 µs per hop (scaling-book), a 1.5 µs
  fixed cost as the TPU v5e profile; a 2x2 slice has no wraparound (TPU axes wrap on multiples of 4), and the
  all-gather over its 4 chips runs as one unidirectional ring (`tpu7x_slice`: the measured rate is one link's worth
  per chip).
- NCCL's Simple ring stages every chunk in a FIFO buffer, and one step of each ring loop is a copy through device
  memory (roofline.Link.memory_bytes_per_s: the profile's memory bandwidth × memory efficiency, which
  `adapters.device_topology` hands the core).
- vidur's runs across 2 nodes are reported as their own dataset (`vidur-a100_dgx-2nodes`): they do not move what a
  DGX A100's network carries. Its send_recv between two nodes reaches 7.8 GB/s at 64 MiB (31 % of one 200 Gb/s HDR
  port, 25 GB/s) and the all-reduce of 2 GPUs on 2 nodes 5.9 GB/s of bus bandwidth; 8 GPUs on 2 nodes 22 GB/s,
  16 GPUs 17.5 GB/s, where 8 HDR ports per node would give a ring 100-200 GB/s. No source on file says which
  network the cluster vidur profiled on had (the data carry only the name "a100_dgx"), so those rows are still
  predicted on the DGX A100 datasheet's fabric and miss by about 3×; a profile fitted to them would be invented.
- Not predicted (no figure on file): the vidur pairwise machines' network between nodes and the A40 table (no A40
  profile; its "NVLink" pair moves 4 GB/s, a PCIe figure).
- aiconfigurator's NCCL tables of B200, GB200, L40S and RTX Pro 6000 (`GENERATIONS`) run on each catalogue profile's
  own fabric. The two PCIe machines move far less than their profiles' PCIe links once a ring spans more than two
  GPUs (L40S: 20 GB/s of bus bandwidth on 2 GPUs, 5 on 4, 1.4 on 8; RTX Pro 6000: 32-38 on 2, ~23 on 4 and 8):
  their GPUs sit behind PCIe switches and CPU sockets whose layout the tables do not record (decision 0030), so
  those rows are predicted on the profiles' links and miss.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import roofline
from adapters import device_topology
from adapters import memory_bytes_per_s as service_memory_bytes_per_s
from hardware_db import load_hardware
from measured.datasets import DATA_DIR, MissingData, open_text, resolve
from schemas.hardware import HardwareCreate

HARDWARE = "a100-sxm-80gb"
HARDWARE_PCIE = "a100-pcie-80gb"  # vidur's pairwise-NVLink machines (A100 PCIe cards)
MIB = 1 << 20
BIG = MIB  # messages of at least 1 MiB: the accuracy target
SMALL = 64 << 10  # messages up to 64 KiB: the latency floor
BUCKETS = ((0, SMALL, "≤64K"), (SMALL, MIB, "64K-1M"), (MIB, 16 * MIB, "1M-16M"), (16 * MIB, float("inf"), "≥16M"))
KERNEL_FLOOR_S = roofline.KERNEL_FLOOR_S  # the shortest kernel of a CUDA-graph replay
# scaling-book's newest per-link ICI figure over Google's for the same links (v5p, v6e: 9e10 / 1e11).
TPU_ICI_EFFICIENCY = 0.9
# TensorRT-LLM hands all-reduces from 2 MiB on to NCCL (its table equals NCCL's): the core's engine all-reduce bound.
CUSTOM_AR_NCCL_FROM = roofline.inference.CUSTOM_ALL_REDUCE_MAX_BYTES
FILES = (
    "aiconfigurator-a100/nccl_perf.csv",
    "aiconfigurator-a100/custom_allreduce_perf.csv",
    "vidur/network/a100_dgx/all_reduce.csv",
    "vidur/network/a100_dgx/send_recv.csv",
    "vidur/network/a100_pairwise_nvlink/all_reduce.csv",
    "vidur/network/a100_pairwise_nvlink/send_recv.csv",
    "llmcompass-a100/allreduce_A100x4_nvlink_transcribed.csv",
    "tpu7x/tpu7x_all_gather_transcribed.csv",
)
# aiconfigurator's NCCL tables of the newer generations (nccl-tests 2.29.2, 2.27.3 on L40S; CUDA-graph replay), each
# predicted on its catalogue profile's own fabric (`adapters.device_topology`): B200's and GB200's NVLink 5 switch,
# the PCIe of L40S and RTX Pro 6000 (no NVLink). Dataset → (table, profile).
GENERATIONS = {
    "aiconfigurator-nccl-b200": ("aiconfigurator-b200/nccl_perf.csv", "b200"),
    "aiconfigurator-nccl-gb200": ("aiconfigurator-gb200/nccl_perf.csv", "gb200"),
    "aiconfigurator-nccl-l40s": ("aiconfigurator-l40s/nccl_perf.csv", "l40s"),
    "aiconfigurator-nccl-rtx-pro-6000": ("aiconfigurator-rtx-pro-6000/nccl_perf.csv", "rtx-pro-6000-server"),
}


def data_dir(path: Path | None = None) -> Path:
    """The validation data directory, or `MissingData` saying where it was looked for."""
    path = path or DATA_DIR
    for name in (*FILES, *(table for table, _ in GENERATIONS.values())):
        resolve(path / name)
    return path


@dataclass(frozen=True)
class Row:
    dataset: str
    op: str
    group: str  # devices (and nodes) as measured
    bytes: float
    measured_s: float
    topology: roofline.Topology
    algorithm: str


@functools.cache
def _profile(slug: str) -> HardwareCreate:
    return next(h for h in load_hardware() if h.slug == slug)


def _a100() -> HardwareCreate:
    return _profile(HARDWARE)


def memory_bytes_per_s(spec: HardwareCreate) -> float:
    """What a buffered library ring copies through (roofline.Link.memory_bytes_per_s), as the service computes it."""
    memory = service_memory_bytes_per_s(spec)
    if memory is None:  # the schema requires it of a device level
        raise ValueError(f"{spec.slug}: no device-memory bandwidth")
    return memory


def _nccl(
    link: roofline.Link, name: str, sync: float, memory: float, fabric: roofline.FabricClass = "scale_up"
) -> roofline.Link:
    return roofline.Link(
        link.bandwidth_bytes_per_s, link.hop_latency_s, link.efficiency, roofline.GPU_LIBRARY_LAUNCH_S,
        "nccl_protocols", sync, name=name, memory_bytes_per_s=memory, fabric=fabric,
    )  # fmt: skip


@dataclass(frozen=True)
class Machines:
    """Topologies of the measured machines."""

    a100: HardwareCreate

    @property
    def memory(self) -> float:
        return memory_bytes_per_s(self.a100)

    def node(self, devices: int) -> roofline.Topology:
        return device_topology(self.a100, devices)  # the service's own topology, memory bandwidth included

    @property
    def efficiency(self) -> float:
        return self.a100.efficiency.interconnect

    def infiniband(self) -> roofline.Link:
        return _nccl(
            roofline.Link(25e9, 5e-6, self.efficiency),
            "HDR InfiniBand",
            roofline.SIMPLE_SYNC_SCALE_OUT_S,
            self.memory,
            "scale_out",
        )

    def dgx(self, devices: int, per_node: int) -> roofline.Topology:
        if devices == per_node:
            return self.node(devices)
        outer = roofline.Switch(devices // per_node, self.infiniband())
        if per_node == 1:
            return outer
        inner = self.node(per_node)
        if isinstance(inner, roofline.Hierarchical):
            raise ValueError("a DGX node is one NVSwitch domain")
        return roofline.Hierarchical(inner, outer)

    @property
    def pcie_memory(self) -> float:
        return memory_bytes_per_s(_profile(HARDWARE_PCIE))

    def nvlink_bridge(self) -> roofline.Switch:
        link = roofline.Link(300e9, 1e-6, self.efficiency)
        return roofline.Switch(2, _nccl(link, "NVLink bridge", roofline.SIMPLE_SYNC_SCALE_UP_S, self.pcie_memory))

    def pairs(self, devices: int) -> roofline.Topology:
        if devices == 2:
            return self.nvlink_bridge()
        pcie = _nccl(
            roofline.Link(31.5e9 / 2, 1e-6, self.efficiency), "PCIe Gen4 x16", roofline.SIMPLE_SYNC_SCALE_UP_S,
            self.pcie_memory, "host",
        )  # fmt: skip
        return roofline.Hierarchical(self.nvlink_bridge(), roofline.Switch(devices // 2, pcie))


def tpu7x_slice() -> roofline.Ring:
    """The 4 chips of a 2x2 TPU7x slice as the benchmark's all-gather uses them: one ring in one direction.

    A 2x2 slice has no wraparound and holds the 4-cycle 0→1→3→2→0 as physical links, so a 4-device group could run
    a bidirectional ring (or both axes at once: 2 links into each chip, SB-SH). The measurement never does: from
    64 MiB to 256 MiB of gathered output each chip takes in 89 GB/s, under one link's 100 GB/s one way, on 2x2x1
    and 2x2x2 alike. One unidirectional ring over the 4 chips (3 hops, 3/4 of the output through each link) is the
    schedule that fits; XLA's TPU all-gather algorithm is not documented in the sources on file. The link reaches
    90 % of Google's figure, as scaling-book's 9e10 against Google's 1e11 for v5p and v6e links (module docstring).
    """
    link = roofline.Link(100e9, 1e-6, TPU_ICI_EFFICIENCY, 1.5e-6, "per_hop_max", name="ICI")
    return roofline.Ring(4, link, bidirectional=False)


def _csv(path: Path) -> Iterator[dict[str, str]]:
    with open_text(path) as f:
        yield from csv.DictReader(f)


def nccl_rows(path: Path, dataset: str, node: Callable[[int], roofline.Topology]) -> Iterator[Row]:
    """An aiconfigurator NCCL table: rings for all_gather, reduce_scatter, all_reduce, direct exchanges for all-to-all
    (module docstring); sizes in elements (× 2 bytes for half, × 1 for int8)."""
    for r in _csv(path):
        op = "all_to_all" if r["op_name"] == "alltoall" else r["op_name"]
        n = int(r["num_gpus"])
        size = int(r["message_size"]) * (2 if r["nccl_dtype"] == "half" else 1)
        algorithm = "direct" if op == "all_to_all" else "ring"
        yield Row(dataset, op, f"{n} GPUs", size, float(r["latency"]) * 1e-3, node(n), algorithm)


def rows(data: Path) -> Iterator[Row]:
    m = Machines(_a100())
    yield from nccl_rows(data / FILES[0], "aiconfigurator-nccl", m.node)
    for dataset, (table, slug) in GENERATIONS.items():
        spec = _profile(slug)
        yield from nccl_rows(data / table, dataset, functools.partial(device_topology, spec))
    for r in _csv(data / FILES[1]):
        n, size = int(r["num_gpus"]), int(r["message_size"]) * 2
        topo = m.node(n)
        if size < CUSTOM_AR_NCCL_FROM:
            topo, algorithm = roofline.with_link(topo, launch_s=KERNEL_FLOOR_S), "direct"
        else:
            algorithm = "ring"
        yield Row("aiconfigurator-custom", "all_reduce", f"{n} GPUs", size, float(r["latency"]) * 1e-3, topo, algorithm)
    for name in FILES[2:6]:
        machine = name.split("/")[2]
        op = Path(name).stem
        for r in _csv(data / name):
            n, per_node = int(r["num_workers"]), int(r["devices_per_node"])
            nodes = n // per_node
            if machine == "a100_pairwise_nvlink" and nodes > 1:
                continue  # no figure on file for that machine's network
            topo = m.dgx(n, per_node) if machine == "a100_dgx" else m.pairs(n)
            group = f"{n} GPUs" + (f", {nodes} nodes" if nodes > 1 else "")
            measured = float(r[f"time_stats.{op}.median"]) * 1e-3
            dataset = f"vidur-{machine}" + (f"-{nodes}nodes" if nodes > 1 else "")  # network unknown: docstring
            yield Row(dataset, op, group, float(r["size"]), measured, topo, "ring")
    for r in _csv(data / FILES[6]):
        yield Row("llmcompass", "all_reduce", "4 GPUs", float(r["size_bytes"]), float(r["latency_us"]) * 1e-6,
                  m.node(4), "ring")  # fmt: skip
    for r in _csv(data / FILES[7]):
        gathered = 4 * int(r["num_elements"]) * 4  # f32 shards of 4 devices (output = 4 × input)
        yield Row("tpu7x", "all_gather", f"{r['topology']} (4 devices)", gathered,
                  float(r["implied_time_us"]) * 1e-6, tpu7x_slice(), "ring")  # fmt: skip


def predict(rows_: list[Row]) -> list[float]:
    """Vectorised: one `roofline.collective` call per (topology, op, algorithm)."""
    out = [0.0] * len(rows_)
    groups: dict[tuple[int, str, str], list[int]] = defaultdict(list)
    topologies: dict[int, roofline.Topology] = {}
    for i, r in enumerate(rows_):
        topologies[id(r.topology)] = r.topology
        groups[(id(r.topology), r.op, r.algorithm)].append(i)
    for (key, op, algorithm), idx in groups.items():
        est = roofline.collective(op, np.array([rows_[i].bytes for i in idx]), topologies[key], algorithm)
        for i, t in zip(idx, est.time_s.tolist(), strict=True):
            out[i] = t
    return out


def _stats(errors: list[float]) -> dict[str, float]:
    ape = sorted(abs(e) for e in errors)
    return {
        "count": len(ape),
        "median_ape": statistics.median(ape),
        "p90_ape": ape[min(len(ape) - 1, round(0.9 * (len(ape) - 1)))],
        "bias": statistics.median(errors),
    }


def report(data: Path) -> list[dict[str, Any]]:
    """One row per dataset (all groups), then per dataset/op/group, with the ≥ 1 MiB statistics, the size buckets
    and the small-message floor."""
    measured = list(rows(data))
    predicted = predict(measured)
    keyed: dict[tuple[str, ...], list[tuple[Row, float]]] = defaultdict(list)
    for r, p in zip(measured, predicted, strict=True):
        keyed[(r.dataset,)].append((r, p))
        keyed[(r.dataset, r.op, r.group)].append((r, p))
    out = []
    for key in sorted(keyed, key=lambda k: (k[0], len(k), k[1:])):
        pairs = keyed[key]
        big = [p / r.measured_s - 1 for r, p in pairs if r.bytes >= BIG]
        small = [(p, r.measured_s) for r, p in pairs if r.bytes <= SMALL]
        entry: dict[str, Any] = {"dataset": key[0], "op": key[1] if len(key) > 1 else "all",
                                 "group": key[2] if len(key) > 1 else "all"}  # fmt: skip
        entry.update(_stats(big) if big else {"count": 0, "median_ape": None, "p90_ape": None, "bias": None})
        # The floor is the fastest that small messages go: the 10th percentile of each side (vidur's small-message
        # medians scatter between 10 and 60 µs from one size to the next).
        entry["floor_ratio"] = (
            float(np.percentile([p for p, _ in small], 10) / np.percentile([m for _, m in small], 10))
            if small
            else None
        )
        entry["buckets"] = {
            label: _stats([p / r.measured_s - 1 for r, p in pairs if lo <= r.bytes < hi])
            for lo, hi, label in BUCKETS
            if any(lo <= r.bytes < hi for r, _ in pairs)
        }
        out.append(entry)
    return out


def _pct(x: float | None) -> str:
    return "      -" if x is None else f"{100 * x:6.1f}%"


def print_report(entries: list[dict[str, Any]], write: Callable[[str], Any] = print) -> None:
    write("Collectives, predicted vs measured. ≥ 1 MiB: points, median and p90 |error|, bias (+: predicted slower);")
    write("floor: predicted / measured fastest small message (p10, ≤ 64 KiB); then the median |error| per size bucket")
    for e in entries:
        name = e["dataset"] if e["op"] == "all" else f"  {e['op']:<14} {e['group']:<26}"
        floor = "-" if e["floor_ratio"] is None else f"{e['floor_ratio']:.2f}"
        buckets = "  ".join(f"{k} {100 * v['median_ape']:.0f}%" for k, v in e["buckets"].items())
        write(f"{name:<44} n={e['count']:<5} median {_pct(e['median_ape'])}  p90 {_pct(e['p90_ape'])}  "
              f"bias {_pct(e['bias'])}  floor {floor:<5} | {buckets}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=None, help=f"validation data (default {DATA_DIR})")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    try:
        data = data_dir(args.data)
    except MissingData as err:
        print(err, file=sys.stderr)
        return 2
    entries = report(data)
    print_report(entries)
    if args.json:
        args.json.write_text(json.dumps(entries, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
