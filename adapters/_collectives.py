"""Collective requests (`schemas.collectives`) and profiles' interconnects as the core's topologies, and the core's
collective estimates as `CollectiveRead`.

`device_topology(spec, devices)` is the one place a hardware profile's interconnect becomes a `roofline.Topology`;
inference runs (tensor-parallel all-reduce, pipeline send/recv, expert all-to-all) and predictions of measured
collectives use it too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import roofline
from adapters._errors import InvalidField
from adapters._intervals import SOURCE, interval_table
from schemas.collectives import CollectivePhase, CollectiveRead, CollectiveRequest, FlatTopology, HierarchicalTopology
from schemas.hardware import HardwareSpec
from schemas.hardware import Link as LinkSpec


def fabric(link: LinkSpec, host: bool = False) -> roofline.Fabric:
    """A catalogue interconnect level as the core's `Fabric` (`host`: the PCIe level standing in for scale-up)."""
    return roofline.Fabric(
        kind=link.topology.value,
        bandwidth_per_direction_bytes_per_s=link.bandwidth_per_direction_bytes_per_s,
        hop_latency_s=link.hop_latency_s,
        name=link.name,
        link_bandwidth_per_direction_bytes_per_s=link.link_bandwidth_per_direction_bytes_per_s,
        domain_devices=link.domain_devices,
        torus_dims=tuple(link.torus_dims) if link.torus_dims else None,
        wraparound_axis_multiple=link.wraparound_axis_multiple,
        host=host,
    )


def memory_bytes_per_s(spec: HardwareSpec) -> float | None:
    """What a buffered library ring copies through (`roofline.Link.memory_bytes_per_s`): the profile's device-memory
    bandwidth × its memory efficiency."""
    bandwidth = spec.memory.device.bandwidth_bytes_per_s
    return None if bandwidth is None else bandwidth * (spec.efficiency.memory or 1.0)


def device_topology(
    spec: HardwareSpec, devices: int, *, efficiency: float | None = None, launch_s: float | None = None
) -> roofline.Topology:
    """The topology `devices` devices of profile `spec` use: its scale-up fabric (PCIe to the host where it has
    none), nodes of the scale-up domain joined by its scale-out fabric beyond. `efficiency` defaults to the
    profile's interconnect efficiency; `launch_s` (a fixed cost per call) to the core's defaults. Raises ValueError
    when the devices do not fit (more than the domain without a scale-out fabric, not whole nodes)."""
    ic = spec.interconnect
    up = ic.scale_up or ic.host
    topology = roofline.device_topology(
        devices,
        fabric(up, host=ic.scale_up is None) if up else None,
        fabric(ic.scale_out) if ic.scale_out else None,
        efficiency=efficiency or spec.efficiency.interconnect,
        launch_s=spec.overheads.kernel_launch_s,
        memory_bytes_per_s=memory_bytes_per_s(spec),
    )
    return topology if launch_s is None else roofline.with_link(topology, launch_s=launch_s)


def _link(level: FlatTopology, body: CollectiveRequest, where: str, scale_out: bool) -> roofline.Link:
    # A flat topology takes its figures from the request's top level (the field to name when they are missing).
    named = "body" if where == "body.topology" else where
    bandwidth = level.link_bandwidth_bytes_per_s or body.link_bandwidth_bytes_per_s
    if bandwidth is None:
        raise InvalidField(f"{named}.link_bandwidth_bytes_per_s", "the link bandwidth (per direction) is required")
    latency = level.hop_latency_s if level.hop_latency_s is not None else body.hop_latency_s
    if latency is None:
        raise InvalidField(f"{named}.hop_latency_s", "the per-hop latency is required")
    launch = level.launch_s if level.launch_s is not None else body.launch_s
    timing: roofline.Timing = "alpha_beta" if level.kind == "switch" else "per_hop_max"
    if level.timing is not None:
        timing = level.timing.value
    return roofline.Link(
        bandwidth_bytes_per_s=bandwidth,
        hop_latency_s=latency,
        efficiency=level.efficiency or body.efficiency or 1.0,
        launch_s=launch or 0.0,
        timing=timing,
        simple_sync_s=roofline.SIMPLE_SYNC_SCALE_OUT_S if scale_out else roofline.SIMPLE_SYNC_SCALE_UP_S,
        in_switch_reduction=level.in_switch_reduction,
        name=f"{level.kind} link",
    )


def _flat(level: FlatTopology, body: CollectiveRequest, where: str, scale_out: bool = False) -> roofline.Flat:
    link = _link(level, body, where, scale_out)
    try:
        if level.kind == "torus":
            axes = tuple(roofline.Axis(a.size, a.wraparound) for a in level.axes or [])
            used = tuple(level.collective_axes) if level.collective_axes else None
            return roofline.Torus(axes, link, used)
        if level.kind == "ring":
            return roofline.Ring(level.devices or 0, link, level.bidirectional)
        return roofline.Switch(level.devices or 0, link)
    except ValueError as err:
        field = "collective_axes" if level.collective_axes and "axis" in str(err) else "axes"
        raise InvalidField(f"{where}.{field if level.kind == 'torus' else 'devices'}", str(err)) from None


def request_topology(body: CollectiveRequest) -> roofline.Topology:
    """The explicit topology of a request, with the request's link figures where a level gives none."""
    topo = body.topology
    if isinstance(topo, HierarchicalTopology):
        inner = _flat(topo.inner, body, "body.topology.inner")
        outer = _flat(topo.outer, body, "body.topology.outer", scale_out=True)
        return roofline.Hierarchical(inner, outer)
    if topo is None:
        raise InvalidField("body.topology", "a topology is required without hardware")
    return _flat(topo, body, "body.topology")


def request_device_topology(body: CollectiveRequest, spec: HardwareSpec) -> roofline.Topology:
    """The topology of a request's `devices` on a profile's own fabric, with the request's efficiency and launch."""
    try:
        return device_topology(spec, body.devices or 0, efficiency=body.efficiency, launch_s=body.launch_s)
    except ValueError as err:
        raise InvalidField("body.devices", str(err)) from None


def describe_topology(topology: roofline.Topology) -> dict[str, Any]:
    """The topology as plain data, for the response's assumptions."""
    if isinstance(topology, roofline.Hierarchical):
        return {
            "kind": "hierarchical",
            "inner": describe_topology(topology.inner),
            "outer": describe_topology(topology.outer),
        }
    link = topology.link
    out: dict[str, Any] = {"kind": type(topology).__name__.lower(), "devices": topology.devices}
    if isinstance(topology, roofline.Torus):
        out["axes"] = [{"size": a.size, "wraparound": a.wraparound} for a in topology.axes]
        out["collective_axes"] = list(topology.used) if topology.used else list(range(len(topology.axes)))
    if isinstance(topology, roofline.Ring):
        out["bidirectional"] = topology.bidirectional
    out["link"] = {
        "name": link.name,
        "bandwidth_bytes_per_s": link.bandwidth_bytes_per_s,
        "efficiency": link.efficiency,
        "hop_latency_s": link.hop_latency_s,
        "launch_s": link.launch_s,
        "timing": link.timing,
        "in_switch_reduction": link.in_switch_reduction,
    }
    if link.timing == "nccl_protocols":
        out["link"]["simple_sync_s"] = link.simple_sync_s
        out["link"]["ll_payload"] = roofline.LL_PAYLOAD
        out["link"]["ll_ring_bus_fraction"] = roofline.LL_RING_BUS_FRACTION
        out["link"]["ll_ring_reduce_bus_fraction"] = roofline.LL_RING_REDUCE_BUS_FRACTION
        out["link"]["memory_bytes_per_s"] = link.memory_bytes_per_s
    return out


def estimate_collective(topology: roofline.Topology, hardware: str | None, body: CollectiveRequest) -> CollectiveRead:
    """The request's collective on `topology` (the profile's name, if it came from one), as its response."""
    try:
        est = roofline.collective(body.op.value, body.bytes, topology, body.algorithm.value)
    except ValueError as err:
        raise InvalidField("body.algorithm", str(err)) from None
    return collective_read(est, topology, hardware)


def collective_read(
    est: roofline.CollectiveEstimate, topology: roofline.Topology, hardware: str | None
) -> CollectiveRead:
    """The response for a scalar estimate."""
    chosen = est.chosen(0)
    alternatives: dict[str, float] = {}
    for c in est.candidates:
        t = float(np.ravel(c.time_s)[0])
        alternatives[c.algorithm] = min(t, alternatives.get(c.algorithm, t))
    schedule = [
        CollectivePhase(
            name=p.name, fabric=p.fabric, steps=p.steps, bytes_per_link=float(np.ravel(p.bytes_per_link)[0]),
            latency_s=float(np.ravel(p.latency_s)[0]), bandwidth_s=float(np.ravel(p.bandwidth_s)[0]),
            time_s=float(np.ravel(p.time_s)[0]),
        )
        for p in chosen.phases
    ]  # fmt: skip
    time = float(est.time_s)
    kind = roofline.intervals.COLLECTIVE
    where = roofline.intervals.collective_regime(float(est.bytes), roofline.fabric_class(topology))
    p10, p90 = interval_table().band(kind, where)[1].bounds(time)
    return CollectiveRead.model_validate(
        {
            "op": est.op,
            "bytes": float(est.bytes),
            "devices": est.devices,
            "time_s": time,
            "time_s_p10": p10,
            "time_s_p90": p90,
            "algbw_bytes_per_s": float(est.algbw_bytes_per_s),
            "busbw_bytes_per_s": float(est.busbw_bytes_per_s),
            "bound": str(est.bound),
            "latency_s": float(est.latency_s),
            "bandwidth_s": float(est.bandwidth_s),
            "steps": int(est.steps),
            "bytes_per_link": float(est.bytes_per_link),
            "algorithm": str(est.algorithm),
            "protocol": str(est.protocol),
            "formula": chosen.formula,
            "source": chosen.source,
            "schedule": schedule,
            "alternatives": alternatives,
            "assumptions": {
                "hardware": hardware,
                "topology": describe_topology(topology),
                "launch_s": chosen.launch_s,
                "bytes_convention": "nccl-tests: gathered output (all_gather), total input (reduce_scatter, "
                "all_reduce), each rank's send buffer (all_to_all)",
                "calibration": "none",
                "interval": {
                    "quantiles": list(roofline.intervals.QUANTILES),
                    "source": SOURCE,
                    "band": f"collectives, {where}",
                },
            },
        }
    )
