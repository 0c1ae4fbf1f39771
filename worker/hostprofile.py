"""A measured hardware profile of this host, built from the `ceilings` suite and kept on the service.

A CPU host has no datasheet profile: the catalogue's `cpu-generic` is a nominal 8-core machine. After the ceilings
suite, the worker turns its measurements into a profile of this host, `host-<hostname>-cpu`, and creates it on the
service (`POST /v1/hardware`) or replaces the one an earlier run made (`PATCH`); later runs on this host resolve to
it and their results are predicted from it (docs/worker.md, "Measured host profiles").

Each measured figure is the value at which the service's own prediction (`adapters.predict`, as an upload runs it)
of its ceiling measurement equals the measured median: the per-call fixed cost from a matmul whose math is
negligible, the memory bandwidth from a streaming sum, each dtype's matmul peak from the largest square. The
efficiencies are therefore 1: these are rates the host reached under XLA:CPU, not datasheet peaks.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import adapters
from schemas.benchmarks import BenchmarkResultCreate, TimingScope
from schemas.hardware import HardwareCreate, Vendor
from schemas.limits import NAME_LENGTH, SLUG_LENGTH
from worker.client import Conflict, RidgelineClient
from worker.results import Measurement

__all__ = ["Ceilings", "HostFacts", "build_profile", "host_slug", "publish", "replacement_patch"]

_SLUG_TEXT = re.compile(r"[^a-z0-9._-]+")
_READ_ONLY = ("slug", "builtin", "version", "created_at", "updated_at")
# Rates are solved for by bisection in log space between these bounds (FLOP/s or bytes/s), to a relative 1e-9.
_RATE_BOUNDS = (1e3, 1e18)
_RELATIVE_TOLERANCE = 1e-9
_ROUNDS = 4  # the fixed cost, bandwidth and peaks each depend weakly on the others: solved in turn until settled


def host_slug(hostname: str) -> str:
    """`host-<hostname>-cpu` as a catalogue slug: lower case, characters outside [a-z0-9._-] as '-', and a long
    name cut to fit 64 characters with 8 hex digits of its SHA-256 so that two long names stay apart."""
    clean = _SLUG_TEXT.sub("-", hostname.lower()).strip("-._") or "unknown"
    slug = f"host-{clean}-cpu"
    if len(slug) <= SLUG_LENGTH:
        return slug
    digest = hashlib.sha256(hostname.encode()).hexdigest()[:8]
    room = SLUG_LENGTH - len("host---cpu") - len(digest)
    return f"host-{clean[:room].rstrip('-._')}-{digest}-cpu"


@dataclass(frozen=True)
class HostFacts:
    """What the operating system says about the host (worker.device), and when the ceilings ran."""

    hostname: str
    description: str  # the CPU's model name
    vendor: str
    cores: int  # os.sched_getaffinity
    memory_bytes: int
    llc_bytes: int | None
    l1d_bytes: int | None
    vector_bytes: int  # SIMD width from /proc/cpuinfo flags
    date: str  # ISO date of the measurement
    software: str = ""  # "jax 0.10.2, jaxlib 0.10.2"


@dataclass(frozen=True)
class Ceilings:
    """The ceilings suite's measurements, by the role their case names in `notes["ceiling"]`."""

    dispatch: Measurement
    stream: Measurement
    peaks: dict[str, Measurement]  # input dtype → the peak product

    @classmethod
    def of(cls, measurements: Iterable[Measurement]) -> Ceilings | None:
        """The ceilings among `measurements`; None unless the dispatch, stream and an fp32 peak are all there."""
        dispatch = stream = None
        peaks: dict[str, Measurement] = {}
        for m in measurements:
            role = m.notes.get("ceiling")
            if role == "dispatch":
                dispatch = m
            elif role == "stream":
                stream = m
            elif role == "matmul_peak":
                peaks[str(m.op["dtype"])] = m
        if dispatch is None or stream is None or "fp32" not in peaks:
            return None
        return cls(dispatch, stream, peaks)


def _solve_rate(predicted_s: Callable[[float], float], measured_s: float, what: str) -> float:
    """The rate x at which `predicted_s(x)` (falling as x grows) equals `measured_s`, by bisection on log x."""
    lo, hi = (math.log(b) for b in _RATE_BOUNDS)
    if predicted_s(math.exp(hi)) > measured_s:
        raise ValueError(
            f"{what}: the measured {measured_s:.3g} s is shorter than the model's time at any rate (the call's fixed "
            "cost alone is longer); measure again on a quieter host"
        )
    while hi - lo > _RELATIVE_TOLERANCE:
        mid = 0.5 * (lo + hi)
        if predicted_s(math.exp(mid)) > measured_s:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi))


def _predict_s(doc: dict[str, Any], op: dict[str, Any]) -> float:
    """The service's prediction of a wall-clock measurement of `op` on the profile `doc` (as an upload stores it)."""
    spec = HardwareCreate.model_validate(doc)
    hw = adapters.scoped_core(spec, spec.slug, TimingScope.wall_clock)
    result = BenchmarkResultCreate.model_validate({"op": op, "median_s": 1.0, "p10_s": 1.0, "p90_s": 1.0})
    time_s: float = adapters.predict(hw, [result.op], spec=spec).time_s[0].item()
    return time_s


def _flops(op: dict[str, Any]) -> float:
    return 2.0 * float(op["m"]) * float(op["n"]) * float(op["k"]) * float(op.get("batch", 1))


def _seconds(x: float) -> str:
    return f"{x * 1e6:.4g} µs" if x < 1e-3 else f"{x * 1e3:.4g} ms"


def _measured_note(c: Ceilings, launch_s: float, bandwidth: float, peaks: dict[str, float]) -> str:
    parts = [f"fixed cost per call {_seconds(launch_s)} (matmul {c.dispatch.op['m']}³ fp32: median "
             f"{_seconds(c.dispatch.stats.median_s)}, {c.dispatch.stats.repeats} calls)"]  # fmt: skip
    for dtype, m in sorted(c.peaks.items()):
        parts.append(f"{dtype} matmul peak {peaks[dtype] / 1e9:.4g} GFLOP/s ({m.op['m']}³: median "
                     f"{_seconds(m.stats.median_s)}, {m.stats.repeats} calls)")  # fmt: skip
    parts.append(f"memory bandwidth {bandwidth / 1e9:.4g} GB/s (sum over {c.stream.op['cols']} fp32: median "
                 f"{_seconds(c.stream.stats.median_s)}, {c.stream.stats.repeats} calls)")  # fmt: skip
    return "Measured: " + "; ".join(parts) + "."


def _stream_time(host: HostFacts, c: Ceilings, launch_s: float, peaks: dict[str, float], bandwidth: float) -> float:
    return _predict_s(_profile(host, c, launch_s, bandwidth, peaks), c.stream.op)


def _peak_time(
    host: HostFacts, c: Ceilings, launch_s: float, bandwidth: float, peaks: dict[str, float], dtype: str, peak: float
) -> float:
    return _predict_s(_profile(host, c, launch_s, bandwidth, {**peaks, dtype: peak}), c.peaks[dtype].op)


def build_profile(ceilings: Ceilings, host: HostFacts) -> dict[str, Any]:
    """The `POST /v1/hardware` body of this host's measured profile (validated against `HardwareCreate`).

    Unknowns: the per-call fixed cost L, the bandwidth B and a matmul peak P per dtype. The service predicts a call
    as L plus its work (`roofline.kernel_time`), so L is the dispatch measurement less the model's work for that
    tiny product; B is the rate at which the stream's prediction equals its median, P the rate at which the peak
    product's does. Each depends a little on the others (the product's tiles wait on memory, the sum has math), so
    they are solved in turn, starting from L = the dispatch median, B = bytes / (t − L), P = FLOPs / (t − L).
    """
    c = ceilings
    launch_s = c.dispatch.stats.median_s
    stream_bytes = 4.0 * c.stream.op["rows"] * c.stream.op["cols"]
    bandwidth = stream_bytes / max(c.stream.stats.median_s - launch_s, 1e-9)
    peaks = {d: _flops(m.op) / max(m.stats.median_s - launch_s, 1e-9) for d, m in c.peaks.items()}
    for _ in range(_ROUNDS):
        stream_s = partial(_stream_time, host, c, launch_s, dict(peaks))
        bandwidth = _solve_rate(stream_s, c.stream.stats.median_s, "memory bandwidth")
        for dtype, m in c.peaks.items():
            peak_s = partial(_peak_time, host, c, launch_s, bandwidth, dict(peaks), dtype)
            peaks[dtype] = _solve_rate(peak_s, m.stats.median_s, f"{dtype} matmul peak")
        work_s = _predict_s(_profile(host, c, launch_s, bandwidth, peaks), c.dispatch.op) - launch_s
        launch_s = c.dispatch.stats.median_s - work_s
        if launch_s <= 0:
            raise ValueError("the dispatch measurement is shorter than its own math; measure again")
    return _profile(host, c, launch_s, bandwidth, peaks, final=True)


def _profile(
    host: HostFacts, c: Ceilings, launch_s: float, bandwidth: float, peaks: dict[str, float], final: bool = False
) -> dict[str, Any]:
    memory: dict[str, Any] = {
        "device": {"name": "DRAM", "capacity_bytes": host.memory_bytes, "bandwidth_bytes_per_s": bandwidth}
    }
    figure_sources = {
        "compute.units": "HOST-OS",
        "compute.matrix_unit": "RL-ASSUME",
        "compute.matrix_unit.per_compute_unit": "INTEL-OPT",
        "compute.matrix_unit.tile_candidates": "BLIS",
        "compute.matrix_unit.alignment_bytes": "HOST-OS",
        "compute.matrix_flops_per_s": "MEASURED",
        "compute.vector_flops_per_s": "MEASURED",
        "memory.device.capacity_bytes": "HOST-OS",
        "memory.device.bandwidth_bytes_per_s": "MEASURED",
        "overheads": "MEASURED",
        "efficiency": "MEASURED",
        "efficiency.interconnect": "RL-ASSUME",
    }
    if host.llc_bytes:
        memory["cache"] = {"name": "LLC", "capacity_bytes": host.llc_bytes}
        figure_sources["memory.cache"] = "HOST-OS"
    if host.l1d_bytes:
        memory["local"] = {"name": "L1d", "capacity_bytes": host.l1d_bytes}
        figure_sources["memory.local"] = "HOST-OS"
    vendor = host.vendor if host.vendor in {v.value for v in Vendor} else Vendor.generic.value
    software = f"; {host.software}" if host.software else ""
    doc: dict[str, Any] = {
        "slug": host_slug(host.hostname),
        "name": f"{host.description}, host {host.hostname} (measured)"[:NAME_LENGTH],
        "vendor": vendor,
        "kind": "cpu",
        "compute": {
            "unit_name": "core",
            "units": host.cores,
            # The FMA pipes that GEMM libraries run on, modelled as the matrix unit (as cpu-generic does).
            "matrix_unit": {
                "name": "FMA pipes (XLA:CPU GEMM)",
                "per_compute_unit": 2,
                "tile_candidates": [{"m": 6, "n": 16}],
                "concurrent_tiles_per_unit": 1,
                "alignment_bytes": host.vector_bytes,
            },
            "matrix_flops_per_s": dict(peaks),
            # Vector code runs on the same FMA pipes: the fp32 matmul rate is the vector rate too.
            "vector_flops_per_s": {"fp32": peaks["fp32"]},
        },
        "memory": memory,
        "overheads": {"kernel_launch_s": launch_s},
        "efficiency": {"matmul": 1.0, "vector": 1.0, "memory": 1.0, "interconnect": 1.0},
        "sources": [
            {"key": "MEASURED", "title": f"measured by ridgeline-worker ceilings on {host.date} (host "
             f"{host.hostname}, {host.description}, {host.cores} cores{software})"},
            {"key": "HOST-OS", "title": f"read from the host's operating system on {host.date}: cores from "
             "os.sched_getaffinity, memory from sysconf(_SC_PHYS_PAGES), caches from "
             "/sys/devices/system/cpu/cpu0/cache, SIMD width from the flags of /proc/cpuinfo"},
            {"key": "INTEL-OPT", "title": "Intel 64 and IA-32 Architectures Optimization Reference Manual (Haswell "
             "and later: two 256-bit FMA units per core)",
             "url": "https://www.intel.com/content/www/us/en/developer/articles/technical/intel64-and-ia32-architectures-optimization.html"},
            {"key": "BLIS", "title": "BLIS Haswell gemm micro-kernels (sgemm 6×16 register tile)",
             "url": "https://github.com/flame/blis/tree/master/kernels/haswell/3"},
            {"key": "RL-ASSUME", "title": "Ridgeline default assumption (no public measurement)"},
        ],
        "figure_sources": figure_sources,
        "notes": [],
    }  # fmt: skip
    if final:
        doc["notes"] = [
            _measured_note(c, launch_s, bandwidth, peaks),
            "Each measured figure is the value at which Ridgeline's own prediction of its ceiling measurement "
            "equals the measured median (worker.hostprofile.build_profile), so the efficiencies are 1: the figures "
            "are rates this host reached under XLA:CPU with the worker's virtual devices, not datasheet peaks.",
            "The vector peak is the fp32 matmul peak (CPU vector code runs on the FMA pipes); the FMA pipes per "
            "core and the BLIS 6×16 register tile are cpu-generic's; one tile per core at a time and the "
            "interconnect efficiency (a single host has no interconnect) are assumptions.",
            "Replaced by the next `ridgeline-worker run --suite ceilings` on this host.",
        ]
        HardwareCreate.model_validate(doc)
    return doc


def replacement_patch(old: Any, new: Any) -> Any:
    """A JSON Merge Patch (RFC 7396) that turns `old` into `new`: what `new` lacks is set to null (removed)."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return new
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        patch[key] = replacement_patch(old.get(key), value)
    return patch


def publish(client: RidgelineClient, doc: dict[str, Any]) -> str:
    """Create the profile, or replace the one with its slug; returns "created" or "updated"."""
    slug = doc["slug"]
    existing = client.hardware(slug)
    if existing is None:
        try:
            client.create_hardware(doc)
            return "created"
        except Conflict:  # another run on this host created it meanwhile
            existing = client.hardware(slug)
            if existing is None:
                raise
    old = {key: value for key, value in existing.items() if key not in _READ_ONLY}
    new = {key: value for key, value in doc.items() if key != "slug"}
    client.update_hardware(slug, replacement_patch(old, new))
    return "updated"
