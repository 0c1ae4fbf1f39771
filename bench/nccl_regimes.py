"""Where NCCL's own tuning model switches protocol, against aiconfigurator's measured NCCL 2.27.3 table (issue 5).

    .venv/bin/python -m bench.nccl_regimes [--data PATH]

An analysis of the collective misses, not a Ridgeline model: for each ring row of aiconfigurator's A100 table
(all-gather, reduce-scatter and all-reduce on 2, 4 and 8 GPUs of one NVSwitch node, half precision, 256 KiB and
up) it prints the measured time, the protocol NCCL's tuning model picks with the time that model gives it, and
Ridgeline's prediction with its protocol. Then, per op and GPU count, the sizes where NCCL's pick changes and
how much the measured time grows across each switch.

NCCL's model, as NCCL 2.29.7's source has it (Debian's `nvidia-nccl` source package, contrib; the same tables sit
in the read-only data of NCCL 2.27.3's `libnccl.so.2`, the NCCL entry of `roofline.collectives`' protocols):
- `src/graph/tuning.cc`, `ncclTunerConstantsDefaults`: baseLat[Ring] = {LL 6.6, LL128 14.0, Simple 8.4} µs,
  hwLat[NVLink][Ring] = {0.6, 1.9, 3.4} µs per step, llMaxBw[Ampere, one node] = 87.7 GB/s,
  perChMaxRingLL128Bw[Ampere] = 20 GB/s per channel.
- `ncclTopoTuneModel`: busBw = nChannels × bwIntra; LL ring min(llMaxBw, busBw × .5); LL128 ring
  min(busBw × .92, nChannels × perChMaxRingLL128Bw); algorithm bandwidth busBw × nRanks / nsteps with
  nsteps = 2(n−1) for all-reduce and n−1 for all-gather and reduce-scatter; latency baseLat + nsteps × hwLat.
  LL128 is enabled on Ampere over NVLink (`pEnable`: typeIntra ≤ PATH_NVB, one compute capability).
- `ncclTopoGetAlgoTime`: time = latency + nBytes / (1000 × bw) µs; `topoGetAlgoInfo` picks the least.
- The A100 ring graph: 12 NVLinks of `SM80_NVLINK_BW` = 20 GB/s to the NVSwitches (`src/graph/topo.h`); the
  search (`src/graph/search.cc`) starts at 40 GB/s per channel, 6 channels fill the 240 GB/s, and
  `ncclTopoDupChannels` doubles them to 12 at 20 GB/s: nChannels × bwIntra = 240 GB/s for 2, 4 and 8 GPUs.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

import roofline
from bench.validate_collectives import DATA_DIR, FILES, Machines, _a100, _csv, data_dir
from measured.datasets import MissingData

PROTOCOLS = ("LL", "LL128", "Simple")
BASE_LAT_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}  # tuning.cc baseLatencies, Ring
NVLINK_HW_LAT_US = {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}  # tuning.cc hwLatencies[NVLINK], Ring
LL_MAX_BW_GBPS = 87.7  # tuning.cc llMaxBws, Ampere, one node
LL128_PER_CHANNEL_GBPS = 20.0  # tuning.cc perChMaxRingLL128Bws, Ampere
A100_RING_CHANNELS = 12  # search.cc: 6 channels at 40 GB/s, doubled by ncclTopoDupChannels
A100_RING_CHANNEL_GBPS = 20.0  # topo.h SM80_NVLINK_BW after the doubling halves 40


def nsteps(op: str, n: int) -> int:
    """tuning.cc: 2(n−1) ring steps for all-reduce, n−1 for all-gather and reduce-scatter."""
    return 2 * (n - 1) if op == "all_reduce" else n - 1


def nccl_time_us(op: str, n: int, nbytes: float, protocol: str) -> float:
    """NCCL's modelled time of a ring `op` on n GPUs of one A100 NVSwitch node (`ncclTopoGetAlgoTime`)."""
    bus = A100_RING_CHANNELS * A100_RING_CHANNEL_GBPS
    if protocol == "LL":
        bus = min(LL_MAX_BW_GBPS, bus * 0.5)
    elif protocol == "LL128":
        bus = min(bus * 0.92, A100_RING_CHANNELS * LL128_PER_CHANNEL_GBPS)
    steps = nsteps(op, n)
    bw = bus * n / steps
    return BASE_LAT_US[protocol] + steps * NVLINK_HW_LAT_US[protocol] + nbytes / (1000 * bw)


def nccl_pick(op: str, n: int, nbytes: float) -> str:
    """The protocol NCCL's tuning model picks: the least modelled time (`topoGetAlgoInfo`)."""
    return min(PROTOCOLS, key=lambda p: nccl_time_us(op, n, nbytes, p))


LL128_PAYLOAD = 120 / 128  # NCCL_LL128_DATAELEMS / NCCL_LL128_LINEELEMS (src/include/device.h): 8 B of flag per line


def what_if(op: str, n: int, nbytes: float, pick: str, est: roofline.CollectiveEstimate, i: int) -> dict[str, float]:
    """Ridgeline's time of row i picked three ways: the faster of its own LL and Simple (shipped); as NCCL picks,
    LL128 priced as the faster of LL and Simple; as NCCL picks, LL128 priced as LL's schedule at LL128's payload
    with NCCL's extra 1.3 µs of LL128 hwLat per step (a prototype, not a model)."""
    by = {c.protocol: c for c in est.candidates}
    ll, simple = float(by["ll"].time_s[i]), float(by["simple"].time_s[i])
    fraction = roofline.LL_RING_REDUCE_BUS_FRACTION if op == "all_reduce" else roofline.LL_RING_BUS_FRACTION
    ll128 = (
        float(by["ll"].latency_s[i])
        + nsteps(op, n) * (NVLINK_HW_LAT_US["LL128"] - NVLINK_HW_LAT_US["LL"]) * 1e-6
        + float(by["ll"].bandwidth_s[i]) * fraction / LL128_PAYLOAD
    )
    as_nccl = {"LL": ll, "Simple": simple, "LL128": min(ll, simple)}
    return {
        "Ridgeline's pick (the faster of its LL and Simple)": min(ll, simple),
        "NCCL's pick, LL128 priced as the faster of LL and Simple": as_nccl[pick],
        "NCCL's pick, LL128 at 120/128 payload + 1.3 µs per step": {**as_nccl, "LL128": ll128}[pick],
    }


def table(data: Path) -> dict[tuple[str, int], dict[int, float]]:
    """Measured µs per (op, GPUs) and byte size: the half-precision ring rows of aiconfigurator's NCCL table."""
    out: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    for r in _csv(data / FILES[0]):
        if r["nccl_dtype"] != "half" or r["op_name"] not in ("all_gather", "reduce_scatter", "all_reduce"):
            continue
        out[(r["op_name"], int(r["num_gpus"]))][int(r["message_size"]) * 2] = float(r["latency"]) * 1e3
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=None, help=f"validation data (default {DATA_DIR})")
    args = parser.parse_args(argv)
    try:
        data = data_dir(args.data)
    except MissingData as err:
        print(err, file=sys.stderr)
        return 2
    machines = Machines(_a100())
    print("size, measured µs; NCCL 2.29.7's tuning model: its pick and its time; Ridgeline: time, protocol, error")
    switches = []
    errors: dict[str, list[float]] = defaultdict(list)  # rows ≥ 1 MiB, per way of picking (summary below)
    steady: list[float] = []  # growth ratios where NCCL keeps its protocol, up to 16 MiB
    for (op, n), measured in sorted(table(data).items()):
        sizes = sorted(b for b in measured if b >= 256 * 1024)
        est = roofline.collective(op, np.array(sizes, dtype=np.float64), machines.node(n), algorithm="ring")
        print(f"{op} on {n} GPUs")
        previous = None
        for i, b in enumerate(sizes):
            pick = nccl_pick(op, n, b)
            ours = float(est.time_s[i]) * 1e6
            print(f"  {b / 2**20:8.2f} MiB  {measured[b]:8.1f}   {pick:<6} {nccl_time_us(op, n, b, pick):8.1f}"
                  f"   {ours:8.1f} {est.protocol[i]!s:<6} {100 * (ours / measured[b] - 1):+6.1f} %")  # fmt: skip
            if b >= 2**20:
                for name, t in what_if(op, n, b, pick, est, i).items():
                    errors[name].append(abs(t * 1e6 / measured[b] - 1))
            if previous is not None and pick != previous[1]:
                switches.append((op, n, previous, (b, pick), measured[previous[0]], measured[b]))
            elif previous is not None and b <= 16 * 2**20:
                steady.append(measured[b] / measured[previous[0]])
            previous = (b, pick)
    print("NCCL's protocol switches: measured time after / before (the size doubles)")
    for op, n, (b0, p0), (b1, p1), t0, t1 in switches:
        print(f"  {op:<15} {n} GPUs  {b0 / 2**20:6.2f} → {b1 / 2**20:6.2f} MiB  {p0:>6} → {p1:<6}  "
              f"{t0:7.1f} → {t1:7.1f} µs  ×{t1 / t0:.2f}")  # fmt: skip
    print("Median |error| of the rows ≥ 1 MiB, by how the protocol is picked:")
    for name, e in errors.items():
        print(f"  {name:<58} {100 * float(np.median(e)):5.1f} %  ({len(e)} rows)")
    print(f"  where NCCL keeps its protocol (256 KiB to 16 MiB, {len(steady)} doublings): median ×"
          f"{float(np.median(steady)):.2f}, range ×{min(steady):.2f}–{max(steady):.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
