"""A device's own fabrics as the topology n of its devices use (`roofline.device_topology`, `roofline.with_link`):
GPU nodes and several of them, TPU slices, full meshes."""

from __future__ import annotations

import pytest

import roofline as rl

NVLINK = rl.Fabric("switch", 300e9, 1e-6, "NVLink", 25e9, domain_devices=8)
IB = rl.Fabric("fat_tree", 50e9, 5e-6, "InfiniBand")


def test_device_topology_of_a_gpu_node_and_of_several() -> None:
    node = rl.device_topology(8, NVLINK, IB, efficiency=0.78, launch_s=5e-6)
    assert isinstance(node, rl.Switch) and node.devices == 8
    assert node.link.timing == "nccl_protocols" and node.link.launch_s == rl.GPU_LIBRARY_LAUNCH_S
    two = rl.device_topology(16, NVLINK, IB, efficiency=0.78)
    assert isinstance(two, rl.Hierarchical) and (two.inner.devices, two.outer.devices) == (8, 2)
    assert two.outer.link.simple_sync_s == rl.SIMPLE_SYNC_SCALE_OUT_S
    with pytest.raises(ValueError, match="no scale-out"):
        rl.device_topology(16, NVLINK)
    with pytest.raises(ValueError, match="whole nodes"):
        rl.device_topology(12, NVLINK, IB)


def test_device_topology_of_a_tpu_slice_wraps_only_whole_axes() -> None:
    v5e = rl.Fabric("torus", 200e9, 1e-6, "ICI", 50e9, 256, (16, 16), 16)
    slice_ = rl.device_topology(64, v5e, launch_s=1.5e-6)
    assert isinstance(slice_, rl.Torus)
    assert slice_.axes == (rl.Axis(16, True), rl.Axis(4, False))  # 16 × 4: only the full axis wraps
    assert slice_.link.bandwidth_bytes_per_s == 50e9 and slice_.link.timing == "per_hop_max"
    v4 = rl.Fabric("torus", 270e9, 1e-6, "ICI", 45e9, 4096, (16, 16, 16), 4)
    cube = rl.device_topology(64, v4)
    assert isinstance(cube, rl.Torus)
    assert cube.axes == (rl.Axis(16, True), rl.Axis(4, True))  # cubes of 4 wrap
    with pytest.raises(ValueError, match="slice"):
        rl.device_topology(17, v5e)


def test_a_full_mesh_shares_a_devices_bandwidth_among_its_peers() -> None:
    mesh = rl.Fabric("mesh", 448e9, 1e-6, "Infinity Fabric", 64e9, domain_devices=8)
    node, pair = rl.device_topology(8, mesh), rl.device_topology(2, mesh)
    assert isinstance(node, rl.Switch) and isinstance(pair, rl.Switch)
    assert node.link.bandwidth_bytes_per_s == 448e9
    assert pair.link.bandwidth_bytes_per_s == pytest.approx(448e9 / 7)  # one peer link


def test_with_link_changes_every_level() -> None:
    two = rl.device_topology(16, NVLINK, IB, efficiency=0.78)
    changed = rl.with_link(two, efficiency=0.5)
    assert isinstance(changed, rl.Hierarchical)
    assert changed.inner.link.efficiency == changed.outer.link.efficiency == 0.5


def test_device_topology_hands_the_memory_bandwidth_to_library_links() -> None:
    two = rl.device_topology(16, NVLINK, IB, efficiency=0.78, memory_bytes_per_s=1835e9)
    assert isinstance(two, rl.Hierarchical)
    assert two.inner.link.memory_bytes_per_s == two.outer.link.memory_bytes_per_s == 1835e9
    assert rl.device_topology(8, NVLINK).link.memory_bytes_per_s is None  # type: ignore[union-attr]


def test_each_topology_names_the_class_of_fabric_that_bounds_it() -> None:
    # Inside the NVLink domain: scale-up; beyond it, nodes over InfiniBand: scale-out (the outer level binds); a
    # device without a scale-up fabric talks over the host's PCIe; TPU ICI is a scale-up torus.
    assert rl.fabric_class(rl.device_topology(8, NVLINK, IB)) == "scale_up"
    assert rl.fabric_class(rl.device_topology(16, NVLINK, IB)) == "scale_out"
    pcie = rl.Fabric("point_to_point", 31.5e9, 1e-6, "PCIe Gen4 x16", host=True)
    assert rl.fabric_class(rl.device_topology(4, pcie)) == "host"
    v5e = rl.Fabric("torus", 200e9, 1e-6, "ICI", 50e9, 256, (16, 16), 16)
    assert rl.fabric_class(rl.device_topology(16, v5e)) == "scale_up"
    assert set(rl.FABRIC_CLASSES) == {"scale_up", "host", "scale_out"}
