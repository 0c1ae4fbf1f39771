"""The devices the core's tests run on, built directly as `roofline.Hardware` and `roofline.Fabric` with the figures
of the catalogue's profiles: what the adapters (`adapters.to_core`,
`adapters.device_topology`) make of them, which tests/adapters/test_core_mapping.py holds equal.

Every figure comes from the profile named beside it (hardware_db/hardware/<slug>.yaml), which cites its source for
each one (`sources` and `figure_sources`: the vendor datasheets and whitepapers, the CUDA programming guide,
measured efficiencies, and RL-ASSUME where no public figure exists, e.g. the 650 ns loaded memory latency).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import roofline

# CTA output tiles cuBLAS/CUTLASS pick among (largest first), the same list in every NVIDIA profile below.
NVIDIA_TILES = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64))

# hardware_db/hardware/a100-sxm-80gb.yaml
A100 = roofline.Hardware(
    name="NVIDIA A100 SXM4 80GB",
    units=108,
    matrix_flops_per_s={"tf32": 156e12, "bf16": 312e12, "fp16": 312e12, "int8": 624e12, "fp64": 19.5e12},
    vector_flops_per_s={"fp64": 9.7e12, "fp32": 19.5e12, "bf16": 39e12, "fp16": 78e12},
    memory_bytes_per_s=2039e9,
    memory_capacity_bytes=80e9,
    launch_s=5e-6,
    eff_matmul=0.87,
    eff_vector=0.80,
    eff_memory=0.90,
    special_function_ops_per_s=2.43648e12,
    cache_bytes=41943040.0,
    cache_bandwidth_bytes_per_s=7.2192e12,
    local_bytes_per_unit=167936.0,
    tiles=NVIDIA_TILES,
    concurrent_tiles_per_unit=1,
    alignment_bytes=16,
    memory_latency_s=650e-9,
    threads_per_unit=2048,
    architecture="sm_80",
    clock_hz=1.41e9,
)

# hardware_db/hardware/h100-sxm.yaml
H100 = roofline.Hardware(
    name="NVIDIA H100 SXM5 80GB",
    units=132,
    matrix_flops_per_s={
        "tf32": 494.5e12,
        "bf16": 989e12,
        "fp16": 989e12,
        "fp8": 1979e12,
        "int8": 1979e12,
        "fp64": 67e12,
    },
    vector_flops_per_s={"fp64": 34e12, "fp32": 67e12, "bf16": 133.8e12, "fp16": 133.8e12},
    memory_bytes_per_s=3.35e12,
    memory_capacity_bytes=80e9,
    launch_s=5e-6,
    eff_matmul=0.81,
    eff_vector=0.80,
    eff_memory=0.90,
    special_function_ops_per_s=3.865e12,
    cache_bytes=50e6,
    cache_bandwidth_bytes_per_s=5.5e12,
    local_bytes_per_unit=233472.0,
    tiles=NVIDIA_TILES,
    concurrent_tiles_per_unit=1,
    alignment_bytes=16,
    memory_latency_s=650e-9,
    threads_per_unit=2048,
    architecture="sm_90",
    clock_hz=1.83e9,
)

# hardware_db/hardware/h200-sxm.yaml: H100's GH100 compute with HBM3e; no L2 bandwidth figure.
H200 = replace(
    H100,
    name="NVIDIA H200 SXM 141GB",
    memory_bytes_per_s=4.8e12,
    memory_capacity_bytes=141e9,
    eff_matmul=0.80,
    cache_bytes=60e6,
    cache_bandwidth_bytes_per_s=None,
)

# hardware_db/hardware/l4.yaml
L4 = roofline.Hardware(
    name="NVIDIA L4 24GB",
    units=58,
    matrix_flops_per_s={"tf32": 60e12, "bf16": 121e12, "fp16": 121e12, "fp8": 242.5e12, "int8": 242.5e12},
    vector_flops_per_s={"fp64": 0.473e12, "fp32": 30.3e12, "bf16": 30.3e12, "fp16": 30.3e12},
    memory_bytes_per_s=300e9,
    memory_capacity_bytes=24e9,
    launch_s=5e-6,
    eff_matmul=0.80,
    eff_vector=0.80,
    eff_memory=0.90,
    special_function_ops_per_s=1.89312e12,
    cache_bytes=48e6,
    cache_bandwidth_bytes_per_s=None,
    local_bytes_per_unit=102400.0,
    tiles=NVIDIA_TILES,
    concurrent_tiles_per_unit=1,
    alignment_bytes=16,
    memory_latency_s=650e-9,
    threads_per_unit=1536,
    architecture="sm_89",
    clock_hz=2.04e9,
)

HARDWARE = {"a100-sxm-80gb": A100, "h100-sxm": H100, "h200-sxm": H200, "l4": L4}

# The profiles' interconnect levels: scale-up (or, without one, PCIe to the host), scale-out, and the profile's
# interconnect efficiency.
_NVLINK3 = roofline.Fabric("switch", 300e9, 1e-6, "NVLink 3 / NVSwitch gen2", 25e9, domain_devices=8)
_NVLINK4 = roofline.Fabric("switch", 450e9, 1e-6, "NVLink 4 / NVSwitch gen3", 25e9, domain_devices=8)
_NDR = roofline.Fabric("fat_tree", 50e9, 5e-6, "InfiniBand NDR (8 × 400 Gb/s ConnectX-7 per node)")
_PCIE4 = roofline.Fabric("point_to_point", 31.5e9, 1e-6, "PCIe Gen4 x16", host=True)  # no NVLink: the host
FABRICS: dict[str, tuple[roofline.Fabric | None, roofline.Fabric | None, float]] = {
    "a100-sxm-80gb": (_NVLINK3, None, 0.78),
    "h100-sxm": (_NVLINK4, _NDR, 0.82),
    "h200-sxm": (_NVLINK4, _NDR, 0.82),
    "l4": (_PCIE4, None, 0.80),
}


class _Topologies:
    """A class, not a closure, so that a system pickles (the planner's search split across processes)."""

    def __init__(self, slug: str) -> None:
        self.slug = slug
        self.made: dict[int, roofline.Topology] = {}

    def __call__(self, devices: int) -> roofline.Topology:
        if devices not in self.made:
            hw = HARDWARE[self.slug]
            scale_up, scale_out, efficiency = FABRICS[self.slug]
            self.made[devices] = roofline.device_topology(
                devices, scale_up, scale_out, efficiency=efficiency, launch_s=hw.launch_s,
                memory_bytes_per_s=hw.memory_bytes_per_s * hw.eff_memory,
            )  # fmt: skip
        return self.made[devices]


def topologies(slug: str) -> Callable[[int], roofline.Topology]:
    """The topology n devices of the profile use for a collective, as the service builds it: the profile's fabrics,
    its interconnect efficiency, its kernel launch for hardware-synchronised fabrics, and its device memory
    bandwidth × memory efficiency for a buffered library ring's copy."""
    return _Topologies(slug)


def system(slug: str, hardware: roofline.Hardware | None = None) -> roofline.System:
    """Devices of profile `slug` with their fabrics (`hardware` overrides the device itself, e.g. its efficiencies)."""
    return roofline.System(HARDWARE[slug] if hardware is None else hardware, topologies(slug))
