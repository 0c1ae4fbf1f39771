"""Collective schedules (`roofline.collectives`: rings, tori, switches, two-level hierarchies) against numbers worked
out by hand (seed 001, scaling-book's sharding chapter, nccl-tests' PERFORMANCE.md, the alpha-beta literature). Each
expected value is written as the arithmetic that gives it."""

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


def test_ring_all_reduce_on_a_switch_bandwidth_bound_reaches_the_link() -> None:
    # 2(n−1) steps of 1 µs + 2(n−1)/n · V / B, with B = 300e9 × 0.78; busbw → B as the latency term vanishes.
    link = rl.Link(300e9, 1e-6, efficiency=0.78, launch_s=8e-6)
    est = rl.collective("all_reduce", 16e9, rl.Switch(8, link), "ring")
    assert one(est.time_s) == pytest.approx(8e-6 + 14 * 1e-6 + 2 * 7 / 8 * 16e9 / (300e9 * 0.78))
    assert one(est.busbw_bytes_per_s) == pytest.approx(234e9, rel=1e-3)
    assert one(est.bytes_per_link) == pytest.approx(2 * 7 / 8 * 16e9)


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
