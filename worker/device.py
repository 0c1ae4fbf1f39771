"""What this worker runs on: the device (GPU, TPU or host CPU), its software versions, and the host.

Detection asks JAX first (it names GPUs and TPU generations), then NVML and PyTorch for GPUs, then the host CPU.
The catalogue slug is not guessed here: the service maps a description to a profile (`GET /v1/hardware/resolve`).
Every probe is best effort: a missing library or driver means "not this one", never an error.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import platform
import re
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Device",
    "cpu_cache_bytes",
    "cpu_cores",
    "cpu_description",
    "cpu_l1d_bytes",
    "cpu_vector_bytes",
    "detect",
    "from_jax_device",
    "host_name",
    "software_versions",
]


@dataclass(frozen=True)
class Device:
    """One kind of local accelerator (or the host CPU) and how many of it this process sees."""

    platform: str  # "gpu" | "tpu" | "cpu"
    vendor: str  # "nvidia" | "amd" | "google" | the CPU's vendor | "unknown"
    description: str  # what the driver calls it: "NVIDIA H100 80GB HBM3", "TPU v5 lite", "AMD EPYC 7B13"
    count: int = 1
    source: str = "cpuinfo"  # which probe found it: jax, nvml, torch, cpuinfo
    compute_units: int | None = None  # SMs, CUs, TensorCores or cores
    compute_capability: str | None = None  # NVIDIA only: "9.0"
    cache_bytes: int | None = None  # last-level cache: L2 of a GPU, LLC of a CPU
    memory_bytes: int | None = None

    @property
    def is_nvidia_gpu(self) -> bool:
        return self.platform == "gpu" and self.vendor == "nvidia"

    def sm_version(self) -> tuple[int, int] | None:
        if not self.compute_capability:
            return None
        match = re.match(r"^(\d+)\.(\d+)", self.compute_capability)
        return (int(match.group(1)), int(match.group(2))) if match else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _optional(module: str) -> Any:
    """Import a module that may not be installed; None when it is not (or fails to load)."""
    try:
        return importlib.import_module(module)
    except Exception:
        return None


def cpu_description(cpuinfo: str | None = None, fallback: str | None = None) -> str:
    """The CPU's model name from /proc/cpuinfo text (x86 `model name`, Arm `Model`/`CPU part`), else `platform`."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    for key in ("model name", "Model", "Hardware", "cpu model", "Processor"):
        match = re.search(rf"^{re.escape(key)}\s*:\s*(.+?)\s*$", cpuinfo, re.MULTILINE)
        if match and match.group(1):
            return re.sub(r"\s+", " ", match.group(1))
    name = fallback if fallback is not None else (platform.processor() or platform.machine())
    return name or "unknown CPU"


def _cpu_vendor(description: str) -> str:
    lowered = description.lower()
    for needle, vendor in (("intel", "intel"), ("amd", "amd"), ("epyc", "amd"), ("ryzen", "amd"), ("apple", "apple")):
        if needle in lowered:
            return vendor
    if platform.machine().lower() in ("aarch64", "arm64"):
        return "arm"
    return "unknown"


def cpu_cache_bytes(sysfs: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """Size of the largest cache level of CPU 0 (the LLC), from sysfs."""
    best: tuple[int, int] | None = None
    for index in sorted(sysfs.glob("index*")):
        try:
            level = int((index / "level").read_text())
            size = _parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if size and (best is None or (level, size) > best):
            best = (level, size)
    return best[1] if best else None


def cpu_l1d_bytes(sysfs: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """Size of CPU 0's level-1 data cache, from sysfs."""
    for index in sorted(sysfs.glob("index*")):
        try:
            if int((index / "level").read_text()) == 1 and (index / "type").read_text().strip() == "Data":
                return _parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
    return None


def cpu_cores() -> int:
    """Cores this process may run on: its CPU affinity (a container's or taskset's share), else the host's count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_vector_bytes(cpuinfo: str | None = None) -> int:
    """Width of the widest SIMD registers the CPU has, from the `flags` of /proc/cpuinfo: AVX-512 64 bytes, AVX
    32, else 16 (SSE, Arm NEON). Intel 64 and IA-32 Architectures Software Developer's Manual, vol. 1, ch. 15."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    match = re.search(r"^flags\s*:\s*(.*)$", cpuinfo, re.MULTILINE)
    flags = set(match.group(1).split()) if match else set()
    if "avx512f" in flags:
        return 64
    return 32 if "avx" in flags else 16


def _physical_memory_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def _parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*B?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"not a cache size: {text!r}")
    return int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2).upper()]


def from_jax_device(platform_name: str, device_kind: str, platform_version: str = "") -> tuple[str, str, str]:
    """(platform, vendor, description) of a JAX device.

    JAX calls NVIDIA and AMD GPUs platform "gpu" (or "cuda" / "rocm"); the backend's platform version says which.
    A GPU's device_kind is the driver's name ("NVIDIA A100-SXM4-80GB", "AMD Instinct MI300X"); a TPU's is its
    generation ("TPU v4", "TPU v5 lite", "TPU v6 lite"); a CPU's is just "cpu", so the caller asks the OS instead.
    """
    name = platform_name.lower()
    kind = device_kind.strip()
    if name == "tpu" or kind.lower().startswith("tpu"):
        return "tpu", "google", kind
    if name in ("gpu", "cuda", "rocm"):
        lowered = f"{kind} {platform_version}".lower()
        if name == "rocm" or "rocm" in lowered or "amd" in lowered or "instinct" in lowered or "radeon" in lowered:
            return "gpu", "amd", kind
        return "gpu", "nvidia", kind
    return "cpu", "unknown", kind


def _detect_jax() -> Device | None:
    jax = _optional("jax")
    if jax is None:
        return None
    try:
        devices = jax.devices()
        backend = jax.extend.backend.get_backend() if hasattr(jax, "extend") else None
        version = str(getattr(backend, "platform_version", "") or "")
    except Exception:
        return None
    first = devices[0]
    kind, vendor, description = from_jax_device(str(first.platform), str(first.device_kind), version)
    if kind == "cpu":
        return None  # JAX's CPU device says nothing about the CPU
    stats: dict[str, Any] = {}
    try:
        stats = first.memory_stats() or {}
    except Exception:
        stats = {}
    capability = getattr(first, "compute_capability", None)
    cores = getattr(first, "core_count", None) or getattr(first, "num_cores", None)
    return Device(
        platform=kind,
        vendor=vendor,
        description=description,
        count=len(devices),
        source="jax",
        compute_units=int(cores) if cores else None,
        compute_capability=str(capability) if capability else None,
        cache_bytes=_torch_l2_bytes() if vendor == "nvidia" else None,
        memory_bytes=int(stats["bytes_limit"]) if "bytes_limit" in stats else None,
    )


def _torch_l2_bytes() -> int | None:
    torch = _optional("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(0).L2_cache_size)
    except Exception:
        pass
    return None


def _detect_nvml() -> Device | None:
    pynvml = _optional("pynvml")
    if pynvml is None:
        return None
    try:
        pynvml.nvmlInit()
        try:
            count = int(pynvml.nvmlDeviceGetCount())
            if count == 0:
                return None
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            name = pynvml.nvmlDeviceGetName(handle)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None
    description = name.decode() if isinstance(name, bytes) else str(name)
    return Device(
        platform="gpu",
        vendor="nvidia",
        description=description,
        count=count,
        source="nvml",
        compute_capability=f"{major}.{minor}",
        cache_bytes=_torch_l2_bytes(),
        memory_bytes=int(memory),
    )


def _detect_torch() -> Device | None:
    torch = _optional("torch")
    try:
        if torch is None or not torch.cuda.is_available():
            return None
        props = torch.cuda.get_device_properties(0)
        is_amd = getattr(torch.version, "hip", None) is not None
        return Device(
            platform="gpu",
            vendor="amd" if is_amd else "nvidia",
            description=str(props.name),
            count=int(torch.cuda.device_count()),
            source="torch",
            compute_units=int(props.multi_processor_count),
            compute_capability=None if is_amd else f"{props.major}.{props.minor}",
            cache_bytes=int(getattr(props, "L2_cache_size", 0)) or None,
            memory_bytes=int(props.total_memory),
        )
    except Exception:
        return None


def _detect_cpu() -> Device:
    description = cpu_description()
    return Device(
        platform="cpu",
        vendor=_cpu_vendor(description),
        description=description,
        count=1,
        source="cpuinfo",
        compute_units=cpu_cores(),
        cache_bytes=cpu_cache_bytes(),
        memory_bytes=_physical_memory_bytes(),
    )


def detect() -> Device:
    """The local accelerator, by the first probe that finds one, or the host CPU."""
    for probe in (_detect_jax, _detect_nvml, _detect_torch):
        found = probe()
        if found is not None:
            return found
    return _detect_cpu()


def host_name() -> str:
    return (socket.gethostname() or platform.node() or "unknown-host")[:200]


def _package_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _cuda_int(version: int) -> str:
    """CUDA's integer versions (12040) as text (12.4)."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def _nvidia_driver() -> str | None:
    pynvml = _optional("pynvml")
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            try:
                version = pynvml.nvmlSystemGetDriverVersion()
            finally:
                pynvml.nvmlShutdown()
            return version.decode() if isinstance(version, bytes) else str(version)
        except Exception:
            pass
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", text)
    return match.group(1) if match else None


def _amd_driver() -> str | None:
    try:
        return Path("/sys/module/amdgpu/version").read_text().strip() or None
    except OSError:
        return None


def software_versions(device: Device) -> dict[str, str]:
    """Versions of everything between the kernels and the silicon, as `POST /v1/benchmarks` takes them."""
    versions: dict[str, str | None] = {
        "python": platform.python_version(),
        "numpy": _package_version("numpy"),
        "jax": _package_version("jax"),
        "jaxlib": _package_version("jaxlib"),
        "triton": _package_version("triton", "pytorch-triton"),
        "torch": _package_version("torch"),
        "libtpu": _package_version("libtpu", "libtpu-nightly"),
        "ridgeline-worker": _package_version("ridgeline"),
    }
    jax = _optional("jax")
    if jax is not None:
        with contextlib.suppress(Exception):
            versions["xla"] = str(jax.extend.backend.get_backend().platform_version).splitlines()[0]
        cuda = getattr(_optional("jax._src.lib"), "cuda_versions", None)
        for key, getter in (("cuda", "cuda_runtime_get_version"), ("cudnn", "cudnn_get_version")):
            try:
                raw = int(getattr(cuda, getter)())
                # cudaRuntimeGetVersion gives 12040 for 12.4; cuDNN's integer changed layout across major versions.
                versions[key] = _cuda_int(raw) if key == "cuda" else str(raw)
            except Exception:
                pass
    if device.platform == "gpu" and device.vendor == "nvidia":
        versions["driver"] = _nvidia_driver()
        if "cuda" not in versions:
            torch = _optional("torch")
            versions["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    elif device.platform == "gpu" and device.vendor == "amd":
        versions["driver"] = _amd_driver()
        torch = _optional("torch")
        versions["rocm"] = getattr(getattr(torch, "version", None), "hip", None)
    clean: dict[str, str] = {}
    for key, value in versions.items():
        if value:
            text = " ".join(str(value).split())[:100]
            if text:
                clean[key] = text
    return clean
