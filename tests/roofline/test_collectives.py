"""The collective model against numbers worked out by hand (seed 001, scaling-book's sharding chapter, nccl-tests'
PERFORMANCE.md, the alpha-beta literature). Each expected value is written as the arithmetic that gives it."""

from __future__ import annotations

import numpy as np
import pytest

import roofline as rl

W = 50e9  # one ICI link, per direction (TPU v5e: 400 GBps bidirectional per chip / 4 ports / 2)
W_BIDI = 2 * W
ALPHA = 1e-6  # scaling-book's ~1 µs per hop
ICI = rl.Link(W, ALPHA, timing="per_hop_max", name="ICI")
GB = 1e9


def one(x: object) -> float:
    return float(np.asarray(x))


def time(op: str, v: float, topo: rl.Topology, algorithm: str = "auto") -> float:
    return one(rl.collective(op, v, topo, algorithm).time_s)


def torus(*axes: tuple[int, bool], used: tuple[int, ...] | None = None) -> rl.Torus:
    return rl.Torus(tuple(rl.Axis(size, wrap) for size, wrap in axes), ICI, used)


# Seed 001: "All Reduce: a Reduce Scatter followed by an All Gather", on a ring of TPUs.
@pytest.mark.parametrize("bidirectional", [False, True])
def test_seed_001_all_reduce_is_reduce_scatter_plus_all_gather(bidirectional: bool) -> None:
    ring = rl.Ring(8, rl.Link(100e9, ALPHA), bidirectional)
    v = 1 * GB
    rs, ag, ar = (time(op, v, ring) for op in ("reduce_scatter", "all_gather", "all_reduce"))
    assert ar == pytest.approx(rs + ag)
    if not bidirectional:  # alpha-beta: 7 steps of 1 µs, then 7/8 of the buffer over one 100 GB/s direction
        assert rs == pytest.approx(7 * 1e-6 + 7 / 8 * 1e9 / 100e9)


def test_seed_001_bidirectional_wraparound_ring_halves_the_bandwidth_term() -> None:
    v = 1 * GB
    one_way = rl.collective("all_gather", v, rl.Ring(8, rl.Link(100e9, ALPHA), bidirectional=False))
    both = rl.collective("all_gather", v, rl.Ring(8, rl.Link(100e9, ALPHA), bidirectional=True))
    assert one(one_way.bandwidth_s) == pytest.approx(7 / 8 * 1e9 / 100e9)  # 8.75 ms
    assert one(both.bandwidth_s) == pytest.approx(7 / 8 * 1e9 / (2 * 100e9))  # 4.375 ms: half
    assert int(one_way.steps) == 7 and int(both.steps) == 4  # ⌈7/2⌉ hops each way


@pytest.mark.parametrize("k", [4, 8, 16])
def test_torus_axis_with_wraparound_gathers_at_v_over_w_bidirectional(k: int) -> None:
    v = 1 * GB  # bandwidth-bound: 1 GB ≫ 50e9 B/s × 1 µs per hop
    est = rl.collective("all_gather", v, torus((k, True), (16, True), used=(0,)))
    # (k−1)/k of V arrives over the axis's two links: (k−1)/k · V / W_bidi → V / W_bidi = 10 ms as k grows.
    assert one(est.time_s) == pytest.approx((k - 1) / k * 1e9 / 100e9)
    # In nccl-tests' terms the answer does not depend on the axis size at all: busbw = W_bidi for every k.
    assert one(est.busbw_bytes_per_s) == pytest.approx(W_BIDI)
    assert str(est.bound) == "bandwidth"


def test_torus_axis_without_wraparound_gets_one_directions_worth() -> None:
    v = 1 * GB
    wrapped = time("all_gather", v, torus((16, True)))
    line = time("all_gather", v, torus((16, False)))
    assert line == pytest.approx(15 / 16 * 1e9 / 50e9)  # (k−1)/k · V / W: 18.75 ms
    assert line == pytest.approx(2 * wrapped)


def test_gathering_over_k_axes_divides_by_k() -> None:
    v = 1 * GB
    one_axis = time("all_gather", v, torus((16, True), (16, True), used=(0,)))
    two_axes = time("all_gather", v, torus((16, True), (16, True)))
    assert two_axes == pytest.approx(255 / 256 * 1e9 / (2 * W_BIDI))  # (N−1)/N · V / (k · W_bidi), N = 256, k = 2
    assert two_axes / one_axis == pytest.approx((255 / 256) / (15 / 16) / 2)  # → 1/2 up to the (N−1)/N factors
    three = time("all_gather", v, torus((4, True), (4, True), (4, True)))
    assert three == pytest.approx(63 / 64 * 1e9 / (3 * W_BIDI))


def test_all_reduce_is_twice_an_all_gather_on_a_torus() -> None:
    t = torus((16, True), (16, True))
    assert time("all_reduce", GB, t) == pytest.approx(2 * time("all_gather", GB, t))
    assert time("reduce_scatter", GB, t) == pytest.approx(time("all_gather", GB, t))


def test_all_to_all_is_a_quarter_of_an_all_gather_on_a_bidirectional_ring() -> None:
    # The same array of A bytes sharded over n devices: an all-gather moves A (its gathered output), an all-to-all
    # re-shards it, each device sending its A/n (nccl-tests counts each rank's send buffer).
    a = 16 * GB
    for n, ratio in [(16, 16 / (4 * 15)), (1024, 1024 / (4 * 1023))]:
        ring = rl.Ring(n, ICI)
        # Both ways: the busiest link carries n/8 of each buffer; the all-gather (n−1)/(2n) of A.
        assert time("all_to_all", a / n, ring) / time("all_gather", a, ring) == pytest.approx(ratio)
    large = rl.Ring(1024, ICI)
    assert time("all_to_all", a / 1024, large) / time("all_gather", a, large) == pytest.approx(1 / 4, rel=1e-3)
    one_way = rl.Ring(16, ICI, bidirectional=False)  # (n−1)/2 of A/n against (n−1)/n of A: exactly half
    assert time("all_to_all", a / 16, one_way) / time("all_gather", a, one_way) == pytest.approx(1 / 2)


def test_the_latency_floor_is_hops_times_the_per_hop_latency() -> None:
    tiny = 1024.0
    assert time("all_gather", tiny, torus((16, True))) == pytest.approx(8 * 1e-6)  # 16/2 hops each way
    assert time("all_gather", tiny, torus((16, False))) == pytest.approx(15 * 1e-6)  # a line: k − 1 hops
    assert time("all_gather", tiny, torus((16, True), (16, True))) == pytest.approx((8 + 8) * 1e-6)
    assert time("all_reduce", tiny, torus((16, True))) == pytest.approx(2 * 8 * 1e-6)
    est = rl.collective("all_gather", tiny, torus((16, True)))
    assert str(est.bound) == "latency" and int(est.steps) == 8


@pytest.mark.parametrize(
    ("op", "factor"),
    [("all_reduce", 2 * 7 / 8), ("all_gather", 7 / 8), ("reduce_scatter", 7 / 8), ("all_to_all", 7 / 8),
     ("broadcast", 1.0), ("reduce", 1.0), ("send_recv", 1.0)],
)  # fmt: skip
def test_bus_bandwidth_uses_the_nccl_tests_factors(op: str, factor: float) -> None:
    est = rl.collective(op, 256e6, rl.Switch(8, rl.Link(300e9, 1e-6)))
    assert one(est.algbw_bytes_per_s) == pytest.approx(256e6 / one(est.time_s))
    assert one(est.busbw_bytes_per_s) == pytest.approx(one(est.algbw_bytes_per_s) * factor)


def test_ring_all_reduce_on_a_switch_bandwidth_bound_reaches_the_link() -> None:
    # 2(n−1) steps of 1 µs + 2(n−1)/n · V / B, with B = 300e9 × 0.78; busbw → B as the latency term vanishes.
    link = rl.Link(300e9, 1e-6, efficiency=0.78, launch_s=8e-6)
    est = rl.collective("all_reduce", 16e9, rl.Switch(8, link), "ring")
    assert one(est.time_s) == pytest.approx(8e-6 + 14 * 1e-6 + 2 * 7 / 8 * 16e9 / (300e9 * 0.78))
    assert one(est.busbw_bytes_per_s) == pytest.approx(234e9, rel=1e-3)
    assert one(est.bytes_per_link) == pytest.approx(2 * 7 / 8 * 16e9)


def test_nccl_protocols_low_latency_for_small_messages_simple_for_large() -> None:
    link = rl.Link(300e9, 1e-6, launch_s=8e-6, timing="nccl_protocols", simple_sync_s=2.8e-6)
    switch = rl.Switch(8, link)
    small = rl.collective("all_gather", 64e3, switch, "ring")
    # LL: 7 steps of 1 µs at a third of the ring's bus bandwidth (NCCL's tuning model): 7/8 · 64e3 / (300e9 / 3).
    assert str(small.protocol) == "ll"
    assert one(small.time_s) == pytest.approx(8e-6 + 7 * 1e-6 + 7 / 8 * 64e3 / 100e9)
    large = rl.collective("all_gather", 1e9, switch, "ring")
    # Simple: 7 steps of 1 + 2.8 µs, full payload.
    assert str(large.protocol) == "simple"
    assert one(large.time_s) == pytest.approx(8e-6 + 7 * 3.8e-6 + 7 / 8 * 1e9 / 300e9)


def test_direct_tree_halving_doubling_and_in_switch_on_a_switch() -> None:
    b, v = 100e9, 1e9
    switch = rl.Switch(8, rl.Link(b, 1e-6, in_switch_reduction=True))
    # Two-shot: a direct reduce-scatter and all-gather, one handshake each.
    assert time("all_reduce", v, switch, "direct") == pytest.approx(2e-6 + 2 * 7 / 8 * v / b)
    # One-shot reads every peer's buffer: wins on latency, loses on bytes.
    one_shot = rl.collective("all_reduce", 1e3, switch, "direct")
    assert one_shot.chosen().phases[0].name == "one_shot"
    assert one(one_shot.time_s) == pytest.approx(1e-6 + 7 * 1e3 / b)
    # Pipelined binary trees: 2⌈log2 8⌉ = 6 steps, about the whole buffer up and down.
    assert time("all_reduce", v, switch, "tree") == pytest.approx(6e-6 + 2 * v / b)
    # Rabenseifner: 2 log2 8 = 6 steps, the ring's bytes.
    assert time("all_reduce", v, switch, "halving_doubling") == pytest.approx(6e-6 + 2 * 7 / 8 * v / b)
    # The switch reduces and multicasts: V/B, not 2(n−1)/n·V/B (scaling-book's GPU chapter).
    assert time("all_reduce", v, switch, "in_switch") == pytest.approx(2e-6 + v / b)
    auto = rl.collective("all_reduce", v, switch)
    assert str(auto.algorithm) == "in_switch"


def test_hierarchical_all_reduce_is_the_distributed_training_book_formula() -> None:
    inner = rl.Switch(8, rl.Link(300e9, 0.0))
    outer = rl.Switch(4, rl.Link(25e9, 0.0))
    v = 1 * GB
    est = rl.collective("all_reduce", v, rl.Hierarchical(inner, outer), "hierarchical")
    rs_inner = 7 / 8 * v / 300e9  # reduce-scatter inside the node
    ar_outer = 2 * 3 / 4 * (v / 8) / 25e9  # all-reduce of the node's 1/8 across 4 nodes, one NIC per GPU
    assert one(est.time_s) == pytest.approx(rs_inner + ar_outer + rs_inner)
    assert [p.name for p in est.chosen().phases] == [  # the all-reduce across nodes is itself RS + AG
        "reduce_scatter within nodes", "reduce_scatter across nodes", "all_gather across nodes",
        "all_gather within nodes",
    ]  # fmt: skip
    flat = rl.collective("all_reduce", v, rl.Hierarchical(inner, outer), "ring")
    # One ring through 32 GPUs; a node's 8 GPUs cross to the next node on their own NICs: min(300, 8 × 25) GB/s.
    assert one(flat.time_s) == pytest.approx(2 * 31 / 32 * v / 200e9)


def test_broadcast_reduce_and_send_recv() -> None:
    ring = rl.Ring(8, rl.Link(100e9, 1e-6), bidirectional=False)
    assert time("broadcast", GB, ring) == pytest.approx(7e-6 + 1e9 / 100e9)  # pipelined: (n−1)·α + V/B
    assert time("send_recv", GB, ring) == pytest.approx(1e-6 + 1e9 / 100e9)
    switch = rl.Switch(8, rl.Link(100e9, 1e-6))
    assert time("reduce", GB, switch, "tree") == pytest.approx(3e-6 + 1e9 / 100e9)


def test_sizes_are_vectorised_and_auto_chooses_per_size() -> None:
    link = rl.Link(300e9, 1e-6, launch_s=8e-6, timing="nccl_protocols", simple_sync_s=2.8e-6)
    sizes = np.logspace(3, 10, 50)
    est = rl.collective("all_reduce", sizes, rl.Switch(8, link))
    assert est.time_s.shape == (50,)
    assert np.all(np.diff(est.time_s) > 0)
    singles = [time("all_reduce", float(s), rl.Switch(8, link)) for s in sizes]
    np.testing.assert_allclose(est.time_s, singles)
    assert set(est.protocol.tolist()) == {"ll", "simple"}
    assert est.bound[0] == "latency" and est.bound[-1] == "bandwidth"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rl.collective("gather_all", 1e6, rl.Switch(8, rl.Link(1e9, 0))), "unknown op"),
        (lambda: rl.collective("all_reduce", 1e6, rl.Switch(8, rl.Link(1e9, 0)), "fastest"), "unknown algorithm"),
        (lambda: rl.collective("all_reduce", 1e6, rl.Switch(6, rl.Link(1e9, 0)), "halving_doubling"), "power-of-two"),
        (lambda: rl.collective("all_reduce", 1e6, rl.Switch(8, rl.Link(1e9, 0)), "in_switch"), "in_switch_reduction"),
        (lambda: rl.collective("all_gather", 1e6, rl.Switch(8, rl.Link(1e9, 0)), "tree"), "does not implement"),
        (lambda: rl.collective("all_gather", 1e6, torus((16, True)), "direct"), "runs ring"),
        (lambda: rl.collective("all_gather", 0.0, rl.Switch(8, rl.Link(1e9, 0))), "positive"),
        (lambda: rl.Switch(1, rl.Link(1e9, 0)), "at least 2"),
        (lambda: rl.Link(0.0, 0), "positive"),
        (lambda: rl.Link(1e9, 0, efficiency=1.5), "efficiency"),
        (lambda: torus((16, True), used=(2,)), "does not exist"),
    ],
)
def test_bad_input_raises_value_error_saying_why(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


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


def test_auto_on_a_library_fabric_weighs_only_what_nccl_runs() -> None:
    # NCCL (2.27.3's algorithms: Tree, Ring, CollNet, NVLS, NVLSTree, PAT) has no one-shot all-reduce: on one node
    # without NVLS a 196 608-byte all-reduce over 4 GPUs is the ring's 6 LL steps, not TensorRT-LLM's one shot.
    link = rl.Link(300e9, 1e-6, launch_s=8e-6, timing="nccl_protocols", simple_sync_s=2.8e-6)
    node = rl.Switch(4, link)
    v = 196_608.0
    auto = rl.collective("all_reduce", v, node)
    assert str(auto.algorithm) == "ring" and str(auto.protocol) == "ll"
    # LL all-reduce: a quarter of the ring's bus bandwidth (NCCL's tuning model), 2 · 3/4 · V / 75e9.
    assert one(auto.time_s) == pytest.approx(8e-6 + 6e-6 + 2 * 3 / 4 * v / 75e9)
    assert one(rl.collective("all_reduce", v, node, "direct").time_s) < one(auto.time_s)  # still there by name
    assert str(rl.collective("all_to_all", v, node).algorithm) == "direct"  # grouped point-to-point
    nvls = rl.Switch(4, rl.Link(300e9, 1e-6, launch_s=8e-6, timing="nccl_protocols", in_switch_reduction=True))
    assert str(rl.collective("all_reduce", 1e9, nvls).algorithm) == "in_switch"


def test_ll_on_a_ring_reaches_nccls_fraction_and_half_payload_elsewhere() -> None:
    # NCCL's tuning model: LL ring bus bandwidth × 1/3 (gathers), × 1/4 (all-reduce, reduce, across nodes);
    # point-to-point keeps LL's half payload. 1 MB on 4 GPUs over 300 GB/s, latencies by hand.
    link = rl.Link(300e9, 1e-6, launch_s=8e-6, timing="nccl_protocols", simple_sync_s=2.8e-6)
    node = rl.Switch(4, link)
    ll = {
        f"{c.algorithm}/{c.protocol}/{op}": one(c.time_s)
        for op, algorithm in (("reduce_scatter", "ring"), ("all_reduce", "ring"), ("all_to_all", "direct"))
        for c in rl.collective(op, 1e6, node, algorithm).candidates
    }
    assert ll["ring/ll/reduce_scatter"] == pytest.approx(8e-6 + 3e-6 + 3 / 4 * 1e6 / 100e9)
    assert ll["ring/ll/all_reduce"] == pytest.approx(8e-6 + 6e-6 + 2 * 3 / 4 * 1e6 / 75e9)
    assert ll["direct/ll/all_to_all"] == pytest.approx(8e-6 + 3e-6 + 3 / 4 * 1e6 / 150e9)
    ib = rl.Link(50e9, 5e-6, launch_s=8e-6, timing="nccl_protocols", simple_sync_s=11.3e-6)
    two = rl.Hierarchical(node, rl.Switch(2, ib))
    ring = rl.collective("all_gather", 1e6, two, "ring")
    # A flat ring of 8 through both levels: B = min(300e9, 4 × 50e9) = 200e9, LL at 1/4 across nodes, α = 5 µs.
    times = {c.protocol: one(c.time_s) for c in ring.candidates}
    assert times["ll"] == pytest.approx(8e-6 + 7 * 5e-6 + 7 / 8 * 1e6 / 50e9)


def test_buffered_simple_ring_adds_one_chunk_copied_through_device_memory() -> None:
    # One chunk (V/n) per rank moved through device memory at M = 2000 GB/s on top of the Simple ring's time: read
    # and written to the send buffer (2 streams, reduce-scatter and all-reduce), and also to the output (3 streams,
    # NCCL's all-gather `directCopySend`): s · (V/n) / M; for Simple only; LL and the point-to-point all-to-all are
    # unchanged; the link's byte count leaves it out.
    bare = rl.Link(300e9, 1e-6, launch_s=8e-6, timing="nccl_protocols", simple_sync_s=2.8e-6)
    buffered = rl.Link(300e9, 1e-6, launch_s=8e-6, timing="nccl_protocols", simple_sync_s=2.8e-6,
                       memory_bytes_per_s=2000e9)  # fmt: skip
    v = 1e9
    for op, n, k, streams in (("all_gather", 2, 1, 3), ("reduce_scatter", 8, 1, 2), ("all_reduce", 4, 2, 2)):
        est = rl.collective(op, v, rl.Switch(n, buffered), "ring")
        assert str(est.protocol) == "simple"
        ring = k * (n - 1) * 3.8e-6 + k * (n - 1) / n * v / 300e9  # steps of 1 + 2.8 µs, full payload
        assert one(est.time_s) == pytest.approx(8e-6 + ring + streams * (v / n) / 2000e9)
        assert one(est.bytes_per_link) == pytest.approx(k * (n - 1) / n * v)
        assert est.chosen().phases[-1].name == "buffer copy"
        plain = rl.collective(op, v, rl.Switch(n, bare), "ring")
        lls = [one(c.time_s) for c in plain.candidates if c.protocol == "ll"]
        assert lls == [one(c.time_s) for c in est.candidates if c.protocol == "ll"]
    a2a = [rl.collective("all_to_all", v, rl.Switch(4, link), "direct") for link in (bare, buffered)]
    assert one(a2a[0].time_s) == one(a2a[1].time_s)
    with pytest.raises(ValueError, match="memory_bytes_per_s"):
        rl.Link(300e9, 1e-6, memory_bytes_per_s=0.0)


def test_device_topology_hands_the_memory_bandwidth_to_library_links() -> None:
    two = rl.device_topology(16, NVLINK, IB, efficiency=0.78, memory_bytes_per_s=1835e9)
    assert isinstance(two, rl.Hierarchical)
    assert two.inner.link.memory_bytes_per_s == two.outer.link.memory_bytes_per_s == 1835e9
    assert rl.device_topology(8, NVLINK).link.memory_bytes_per_s is None  # type: ignore[union-attr]
