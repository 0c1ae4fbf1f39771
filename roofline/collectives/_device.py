"""A device's own fabrics (a hardware profile's interconnect levels) as the topology n of its devices use."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from roofline.collectives._protocols import GPU_LIBRARY_LAUNCH_S, SIMPLE_SYNC_SCALE_OUT_S, SIMPLE_SYNC_SCALE_UP_S
from roofline.collectives._topology import (
    Axis,
    FabricClass,
    Flat,
    Hierarchical,
    Link,
    Ring,
    Switch,
    Topology,
    Torus,
    check_devices,
)

FabricKind = Literal["switch", "torus", "ring", "mesh", "fat_tree", "point_to_point"]


@dataclass(frozen=True)
class Fabric:
    """A hardware profile's interconnect level, as the catalogue states it (schemas.hardware.Link), SI units."""

    kind: FabricKind
    bandwidth_per_direction_bytes_per_s: float
    hop_latency_s: float
    name: str = "fabric"
    link_bandwidth_per_direction_bytes_per_s: float | None = None
    domain_devices: int | None = None
    torus_dims: tuple[int, ...] | None = None
    wraparound_axis_multiple: int | None = None
    host: bool = False  # the host's PCIe standing in for a scale-up fabric the device lacks


def _class(f: Fabric, scale_out: bool) -> FabricClass:
    return "scale_out" if scale_out else "host" if f.host else "scale_up"


def _library_link(f: Fabric, bandwidth: float, efficiency: float, scale_out: bool, memory: float | None) -> Link:
    sync = SIMPLE_SYNC_SCALE_OUT_S if scale_out else SIMPLE_SYNC_SCALE_UP_S
    return Link(
        bandwidth, f.hop_latency_s, efficiency, GPU_LIBRARY_LAUNCH_S, "nccl_protocols", sync, name=f.name,
        memory_bytes_per_s=memory, fabric=_class(f, scale_out),
    )  # fmt: skip


def _torus_axes(devices: int, dims: tuple[int, ...], multiple: int) -> tuple[Axis, ...]:
    """A slice of `devices` chips: fill the axes in order, each with the largest divisor that fits, so whole axes
    (which have wraparound) come first. An axis wraps when its size is a multiple of `multiple`."""
    axes, left = [], devices
    for dim in dims:
        size = max(d for d in range(1, min(dim, left) + 1) if left % d == 0)
        if size > 1:
            axes.append(Axis(size, size % multiple == 0))
        left //= size
    if left != 1:
        raise ValueError(f"{devices} devices do not form a slice of a {'x'.join(map(str, dims))} torus")
    return tuple(axes)


def _level(
    f: Fabric, devices: int, efficiency: float, launch_s: float, scale_out: bool, memory: float | None = None
) -> Flat:
    if f.kind == "torus":
        if f.torus_dims is None or f.wraparound_axis_multiple is None:
            raise ValueError(f"{f.name}: a torus needs torus_dims and wraparound_axis_multiple")
        per_link = f.link_bandwidth_per_direction_bytes_per_s or f.bandwidth_per_direction_bytes_per_s
        link = Link(per_link, f.hop_latency_s, efficiency, launch_s, "per_hop_max", name=f.name,
                    fabric=_class(f, scale_out))  # fmt: skip
        return Torus(_torus_axes(devices, f.torus_dims, f.wraparound_axis_multiple), link)
    if f.kind == "ring":
        per_link = f.link_bandwidth_per_direction_bytes_per_s or f.bandwidth_per_direction_bytes_per_s / 2
        link = Link(per_link, f.hop_latency_s, efficiency, launch_s, "per_hop_max", name=f.name,
                    fabric=_class(f, scale_out))  # fmt: skip
        return Ring(devices, link)
    bandwidth = f.bandwidth_per_direction_bytes_per_s
    if f.kind == "mesh" and f.domain_devices and f.domain_devices > 2:
        # A full mesh splits a device's bandwidth over its peers; only links to participants carry data.
        bandwidth *= min(1.0, (devices - 1) / (f.domain_devices - 1))
    return Switch(devices, _library_link(f, bandwidth, efficiency, scale_out, memory))


def device_topology(
    devices: int,
    scale_up: Fabric | None,
    scale_out: Fabric | None = None,
    *,
    efficiency: float = 1.0,
    launch_s: float = 0.0,
    memory_bytes_per_s: float | None = None,
) -> Topology:
    """The topology `devices` devices of one hardware profile use for a collective.

    Up to the scale-up domain (NVLink/NVSwitch, Infinity Fabric, TPU ICI) the collective stays on it; beyond, the
    devices form nodes (or pods) of `domain_devices` joined by `scale_out`, a two-level hierarchy. Switched and mesh
    fabrics are costed as a GPU collective library (`GPU_LIBRARY_LAUNCH_S` per call, LL/Simple protocols); tori and
    rings as hardware-synchronised transfers with `launch_s` (the device's kernel launch) per call. `efficiency` is
    the profile's interconnect efficiency. `memory_bytes_per_s` (the device's memory bandwidth × its memory
    efficiency) costs the buffered Simple ring's copy through device memory on library fabrics (`Link`); None leaves
    it out. Raises ValueError when the devices do not fit the profile's fabrics.
    """
    check_devices("devices", devices)
    if scale_up is None:
        if scale_out is None:
            raise ValueError("the profile has no interconnect for a collective")
        return _level(scale_out, devices, efficiency, launch_s, True, memory_bytes_per_s)
    domain = scale_up.domain_devices or devices
    if scale_up.kind == "torus" and scale_up.torus_dims:
        domain = min(domain, math.prod(scale_up.torus_dims))
    if devices <= domain:
        return _level(scale_up, devices, efficiency, launch_s, False, memory_bytes_per_s)
    if scale_out is None:
        raise ValueError(f"{devices} devices exceed the {domain}-device {scale_up.name} domain and the profile has "
                         "no scale-out fabric")  # fmt: skip
    if devices % domain:
        raise ValueError(f"{devices} devices are not whole nodes of {domain} ({scale_up.name})")
    inner = _level(scale_up, domain, efficiency, launch_s, False, memory_bytes_per_s)
    outer = _level(scale_out, devices // domain, efficiency, launch_s, True, memory_bytes_per_s)
    return Hierarchical(inner, outer)


def with_link(topology: Topology, **changes: object) -> Topology:
    """The same topology with fields of every link replaced (e.g. `efficiency=0.7`, `launch_s=2.5e-6`)."""
    if isinstance(topology, Hierarchical):
        return Hierarchical(_flat_with_link(topology.inner, changes), _flat_with_link(topology.outer, changes))
    return _flat_with_link(topology, changes)


def _flat_with_link(topology: Flat, changes: dict[str, object]) -> Flat:
    return replace(topology, link=replace(topology.link, **changes))  # type: ignore[arg-type]
