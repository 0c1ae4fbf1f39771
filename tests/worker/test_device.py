"""Device detection and the mapping of device descriptions to catalogue profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from worker.device import (
    Device,
    cpu_cache_bytes,
    cpu_cores,
    cpu_description,
    cpu_l1d_bytes,
    cpu_vector_bytes,
    detect,
    from_jax_device,
    software_versions,
)

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
cache size\t: 107520 KB
"""
RASPBERRY = "processor\t: 0\nBogoMIPS\t: 108.00\nCPU part\t: 0xd08\n\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n"


def test_cpu_model_name_from_cpuinfo() -> None:
    assert cpu_description(XEON) == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    assert cpu_description(RASPBERRY) == "Raspberry Pi 4 Model B Rev 1.4"
    assert cpu_description("processor : 0\n", fallback="x86_64") == "x86_64"


@pytest.mark.parametrize(
    ("platform", "kind", "version", "expected"),
    [
        ("gpu", "NVIDIA H100 80GB HBM3", "cuda 12030", ("gpu", "nvidia", "NVIDIA H100 80GB HBM3")),
        ("cuda", "NVIDIA A100-SXM4-40GB", "", ("gpu", "nvidia", "NVIDIA A100-SXM4-40GB")),
        ("gpu", "AMD Instinct MI300X", "rocm 60200", ("gpu", "amd", "AMD Instinct MI300X")),
        ("rocm", "gfx942", "", ("gpu", "amd", "gfx942")),
        ("tpu", "TPU v5 lite", "", ("tpu", "google", "TPU v5 lite")),
        ("tpu", "TPU v4", "", ("tpu", "google", "TPU v4")),
        ("cpu", "cpu", "", ("cpu", "unknown", "cpu")),
    ],
)
def test_jax_devices_map_to_platform_vendor_and_description(
    platform: str, kind: str, version: str, expected: tuple[str, str, str]
) -> None:
    assert from_jax_device(platform, kind, version) == expected


def test_last_level_and_l1_data_caches_from_sysfs(tmp_path: Path) -> None:
    # Linux's layout for one core of a Sapphire Rapids: index0 L1d 48K, index1 L1i 32K, L2 2M, L3 (here 32M).
    caches = (
        (0, 1, "Data", "48K"),
        (1, 1, "Instruction", "32K"),
        (2, 2, "Unified", "2048K"),
        (3, 3, "Unified", "32768K"),
    )
    for index, level, kind, size in caches:
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    assert cpu_cache_bytes(tmp_path) == 32 << 20
    assert cpu_l1d_bytes(tmp_path) == 48 << 10
    assert cpu_cache_bytes(tmp_path / "missing") is None and cpu_l1d_bytes(tmp_path / "missing") is None


def test_simd_width_from_cpuinfo_flags() -> None:
    # 64 bytes for AVX-512 (zmm), 32 for AVX/AVX2 (ymm), 16 otherwise (SSE xmm, NEON).
    assert cpu_vector_bytes(XEON + "flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw\n") == 64
    assert cpu_vector_bytes(XEON + "flags\t\t: fpu sse2 avx avx2 fma\n") == 32
    assert cpu_vector_bytes(RASPBERRY + "Features\t: fp asimd\n") == 16


def test_cores_are_those_this_process_may_use() -> None:
    assert cpu_cores() == len(os.sched_getaffinity(0))
    assert detect().compute_units == cpu_cores()


def test_this_host_is_detected_as_its_cpu() -> None:
    # CI and the development machines have no accelerator: JAX's CPU device names nothing, /proc/cpuinfo does.
    device = detect()
    assert device.platform == "cpu" and device.source == "cpuinfo"
    assert device.description == cpu_description()
    versions = software_versions(device)
    assert versions["jax"] and versions["jaxlib"] and versions["python"]


def test_compute_capability_parses() -> None:
    assert Device("gpu", "nvidia", "H100", compute_capability="9.0").sm_version() == (9, 0)
    assert Device("cpu", "amd", "EPYC").sm_version() is None


# What each probe reports on real machines (NVML / nvidia-smi names, JAX device kinds, ROCm, /proc/cpuinfo) and the
# profile the service must map it to; the worker sends exactly these strings to /v1/hardware/resolve.
DESCRIPTIONS = [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
    ("NVIDIA L4", "l4"),
    ("AMD Instinct MI300X", "mi300x"),
    ("TPU v4", "tpu-v4"),
    ("TPU v5 lite", "tpu-v5e"),
    ("TPU v6 lite", "tpu-v6e"),
    ("AMD EPYC", "cpu-generic"),
    ("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "cpu-generic"),
    ("cpu", "cpu-generic"),
]


@pytest.mark.parametrize(("description", "slug"), DESCRIPTIONS)
def test_device_descriptions_resolve_to_catalogue_profiles(client: TestClient, description: str, slug: str) -> None:
    response = client.get("/v1/hardware/resolve", params={"device": description})
    assert response.status_code == 200, response.text
    assert response.json()["slug"] == slug


def test_an_unknown_device_is_a_404(client: TestClient) -> None:
    assert client.get("/v1/hardware/resolve", params={"device": "Mystery Accelerator 9000"}).status_code == 404
