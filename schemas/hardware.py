"""Hardware profiles: the contract for the catalogue files, `POST /v1/hardware` and inline profiles.

All figures are SI with the unit in the field name (`bandwidth_bytes_per_s`, `hop_latency_s`). Peak FLOP/s are
*dense* (never the 2:4-sparse figure). Interconnect bandwidths are *per direction*.

Every number must be traced to a source: `sources` lists citations and `figure_sources` maps a dotted field path
(or a prefix of one, e.g. `memory` or `compute.matrix_flops_per_s`) to a source key. The most specific path wins.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, Field, model_validator

from schemas import limits
from schemas.common import (
    Dtype,
    Fraction,
    InputModel,
    LongText,
    PositiveFloat,
    ShortText,
    Slug,
    Source,
    UtcDatetime,
)

# Counts of a device's parts, bounded (schemas.limits): wave and tile arithmetic divides and multiplies by them.
Units = Annotated[int, Field(ge=1, le=limits.MAX_COMPUTE_UNITS)]
PartCount = Annotated[int, Field(ge=1, le=limits.MAX_UNIT_COUNT)]
Capacity = Annotated[int, Field(ge=1, le=limits.MAX_CAPACITY_BYTES)]
DeviceCount = Annotated[int, Field(ge=1, le=limits.MAX_DEVICES)]


class Vendor(StrEnum):
    nvidia = "nvidia"
    amd = "amd"
    google = "google"
    intel = "intel"
    generic = "generic"


class DeviceKind(StrEnum):
    gpu = "gpu"
    tpu = "tpu"
    cpu = "cpu"


class Topology(StrEnum):
    switch = "switch"  # every device reaches every other at its full bandwidth (NVSwitch)
    torus = "torus"  # TPU ICI: per-axis rings, wraparound per `wraparound_axis_multiple`
    ring = "ring"
    mesh = "mesh"  # full mesh of point-to-point links (AMD Infinity Fabric in an 8-GPU node)
    fat_tree = "fat_tree"  # scale-out InfiniBand / RoCE / DCN
    point_to_point = "point_to_point"  # PCIe to the host


class Tile(InputModel):
    """An output tile (thread-block / CTA tile, or an MXU pass) a matmul library may choose."""

    m: PartCount
    n: PartCount


class MatrixUnit(InputModel):
    """The matrix engine (tensor cores, MXU, AMX/AVX-512 FMA) and what tile/wave quantization needs."""

    name: ShortText
    per_compute_unit: PartCount = Field(description="Matrix units per compute unit (tensor cores per SM).")
    tile_candidates: list[Tile] = Field(
        min_length=1,
        max_length=limits.MAX_LIST,
        description="Output tiles a library heuristic picks among; tiles = ceil(M/tm)*ceil(N/tn).",
    )
    concurrent_tiles_per_unit: PartCount = Field(
        default=1, description="Tiles resident on one compute unit at once; a wave is units × this many tiles."
    )
    alignment_bytes: PartCount = Field(
        description="Dimensions that are multiples of this many bytes load with full-width vector accesses."
    )


class Compute(InputModel):
    unit_name: ShortText = Field(description="What a compute unit is called: SM, CU, TensorCore, core.")
    units: Units = Field(description="Compute units per device (SMs, CUs, TensorCores, cores).")
    clock_hz: PositiveFloat | None = None
    matrix_unit: MatrixUnit | None = None
    matrix_flops_per_s: dict[Dtype, PositiveFloat] = Field(
        default_factory=dict, description="Dense peak on the matrix unit, per input dtype (fp32 accumulate)."
    )
    vector_flops_per_s: dict[Dtype, PositiveFloat] = Field(
        min_length=1, description="Dense peak on the vector unit (CUDA cores, VPU, SIMD), per dtype."
    )
    special_function_ops_per_s: PositiveFloat | None = Field(
        default=None, description="Transcendental (exp, sin, rsqrt) results per second on the special-function units."
    )
    architecture: ShortText | None = Field(
        default=None,
        description="Instruction-set generation, e.g. sm_80 (CUDA compute capability 8.0): selects per-architecture "
        "measured costs such as XLA's elementwise ALU costs.",
    )
    threads_per_unit: PartCount | None = Field(
        default=None,
        description="Resident threads per compute unit (CUDA: maximum threads per SM); with the device memory's "
        "latency it bounds the bandwidth a kernel with few bytes in flight per thread reaches (Little's law).",
    )

    @model_validator(mode="after")
    def _matrix_unit_needs_a_peak(self) -> Compute:
        if self.matrix_unit is not None and not self.matrix_flops_per_s:
            raise ValueError("matrix_flops_per_s must list at least one dtype when matrix_unit is given")
        return self


class MemoryLevel(InputModel):
    name: ShortText = Field(description="HBM3, GDDR6, DDR5, L2, CMEM, shared memory, VMEM…")
    capacity_bytes: Capacity
    bandwidth_bytes_per_s: PositiveFloat | None = None
    latency_s: PositiveFloat | None = Field(
        default=None, description="Load latency under load, seconds (device memory: HBM/GDDR round trip)."
    )


class Memory(InputModel):
    device: MemoryLevel = Field(description="Main device memory (HBM / GDDR / DRAM); bandwidth required.")
    cache: MemoryLevel | None = Field(default=None, description="Device-wide last-level cache: L2, CMEM, LLC.")
    local: MemoryLevel | None = Field(
        default=None,
        description="On-chip memory per compute unit (shared memory per SM, VMEM per TensorCore); capacity per unit.",
    )

    @model_validator(mode="after")
    def _device_bandwidth(self) -> Memory:
        if self.device.bandwidth_bytes_per_s is None:
            raise ValueError("device.bandwidth_bytes_per_s is required")
        return self


class Overheads(InputModel):
    kernel_launch_s: PositiveFloat = Field(description="Fixed cost of one kernel (launch and ramp), seconds.")


class Efficiency(InputModel):
    """Default fractions of peak that well-tuned kernels reach (large shapes), before any calibration."""

    matmul: Fraction
    vector: Fraction
    memory: Fraction
    interconnect: Fraction


class Link(InputModel):
    name: ShortText
    topology: Topology
    bandwidth_per_direction_bytes_per_s: PositiveFloat = Field(
        description="What one device can send (and at the same time receive) over this fabric, all links together."
    )
    links: PartCount | None = Field(default=None, description="Links (ports) per device on this fabric.")
    link_bandwidth_per_direction_bytes_per_s: PositiveFloat | None = None
    hop_latency_s: PositiveFloat = Field(description="Latency of one hop / one step of a collective, seconds.")
    domain_devices: DeviceCount | None = Field(
        default=None, description="Devices reachable on this fabric: GPUs per NVLink domain, chips per TPU pod."
    )
    torus_dims: list[DeviceCount] | None = Field(
        default=None, max_length=8, description="Largest torus shape (TPU pod or slice), one size per axis."
    )
    wraparound_axis_multiple: DeviceCount | None = Field(
        default=None,
        description="A torus axis has wraparound links only when its size is a multiple of this (16 on v5e/v6e: "
        "only full axes; 4 on v4/v5p: whole cubes joined by optical switches).",
    )

    @model_validator(mode="after")
    def _torus_facts(self) -> Link:
        if self.topology is Topology.torus and (self.torus_dims is None or self.wraparound_axis_multiple is None):
            raise ValueError("a torus needs torus_dims and wraparound_axis_multiple")
        return self


class Interconnect(InputModel):
    scale_up: Link | None = Field(default=None, description="NVLink/NVSwitch, Infinity Fabric, TPU ICI.")
    scale_out: Link | None = Field(default=None, description="InfiniBand / RoCE / DCN between nodes or pods.")
    host: Link | None = Field(default=None, description="PCIe (or equivalent) to the host.")


class Power(InputModel):
    tdp_w: PositiveFloat


class HardwareSpec(InputModel):
    """Every field of a hardware profile except its identity."""

    name: ShortText
    vendor: Vendor
    kind: DeviceKind
    compute: Compute
    memory: Memory
    overheads: Overheads
    efficiency: Efficiency
    interconnect: Interconnect = Field(default_factory=Interconnect)
    power: Power | None = None
    sources: list[Source] = Field(min_length=1, max_length=limits.MAX_SOURCES)
    figure_sources: dict[
        Annotated[str, Field(max_length=limits.FIELD_PATH_LENGTH)], Annotated[str, Field(max_length=limits.KEY_LENGTH)]
    ] = Field(
        min_length=1,
        max_length=limits.MAX_SOURCES,
        description="Dotted field path or prefix → source key. Every number in the profile must be covered.",
    )
    notes: list[LongText] = Field(
        default_factory=list, max_length=limits.MAX_SOURCES, description="Conflicts between sources and how we chose."
    )

    @model_validator(mode="after")
    def _every_figure_has_a_source(self) -> HardwareSpec:
        check_figure_sources(self)
        return self


class HardwareCreate(HardwareSpec):
    slug: Slug


class HardwareRead(HardwareCreate):
    builtin: bool = Field(description="Built-in catalogue entries are read-only through the API.")
    version: int = Field(
        description="1, 2, …: every change of the profile is a new version; a stored run names the version it was "
        "predicted with (GET /v1/hardware/{slug}/versions/{version})."
    )
    created_at: UtcDatetime
    updated_at: UtcDatetime


class HardwareSummary(BaseModel):
    slug: str
    name: str
    vendor: Vendor
    kind: DeviceKind
    builtin: bool


# Top-level fields that are not figures: citations, words, and a read's `version` (the service's count of changes).
_SOURCE_FIELDS = {"sources", "figure_sources", "notes", "name", "vendor", "kind", "version"}


def numeric_leaves(value: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every number (or list of numbers/tiles) in a dumped profile."""
    paths: list[str] = []
    if isinstance(value, dict):
        for key, sub in value.items():
            if prefix == "" and key in _SOURCE_FIELDS:
                continue
            paths.extend(numeric_leaves(sub, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list):
        if value and any(numeric_leaves(item, prefix) for item in value):
            paths.append(prefix)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        paths.append(prefix)
    return paths


def all_paths(value: Any, prefix: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(value, dict):
        for key, sub in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.add(path)
            out |= all_paths(sub, path)
    return out


def source_for(path: str, figure_sources: dict[str, str]) -> str | None:
    """The source key of the most specific entry of `figure_sources` covering `path`."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        key = figure_sources.get(".".join(parts[:end]))
        if key is not None:
            return key
    return None


def check_figure_sources(spec: HardwareSpec) -> None:
    keys = {s.key for s in spec.sources}
    if len(keys) != len(spec.sources):
        raise ValueError("sources: keys must be unique")
    dumped = spec.model_dump(mode="json", exclude_none=True)
    known = all_paths(dumped)
    for path, key in spec.figure_sources.items():
        if key not in keys:
            raise ValueError(f"figure_sources[{path!r}] cites {key!r}, which is not in sources")
        if path not in known:
            raise ValueError(f"figure_sources names {path!r}, which is not a field of this profile")
    missing = [p for p in numeric_leaves(dumped) if source_for(p, spec.figure_sources) is None]
    if missing:
        raise ValueError("figures without a source (add them to figure_sources): " + ", ".join(missing))
