"""NCCL's protocols as the core costs them (`roofline.collectives`: LL and Simple, NCCL's LL ring fractions, the
buffered Simple ring's copy through device memory), by hand from NCCL's tuning model and ring kernels."""

from __future__ import annotations

import numpy as np
import pytest

import roofline as rl


def one(x: object) -> float:
    return float(np.asarray(x))


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
    # The all-to-all's self round takes its share of the channels on a scale-up fabric: the whole 1 MB, not 3/4.
    assert ll["direct/ll/all_to_all"] == pytest.approx(8e-6 + 3e-6 + 1e6 / 150e9)
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


def test_a_hierarchical_collective_copies_through_memory_at_each_level_under_simple_only() -> None:
    # Each level's ring is a buffered Simple ring: the reduce-scatter inside 4-GPU nodes copies its chunk V/4 (2
    # streams), the all-reduce of V/4 across 2 nodes its chunk V/8 (2 streams), the all-gather inside V/4 (3 streams),
    # at M = 2000 GB/s. LL stages nothing: the same steps without the copies (NCCL's LL figure holds its own).
    link = rl.Link(300e9, 1e-6, launch_s=8e-6, timing="nccl_protocols", simple_sync_s=2.8e-6,
                   memory_bytes_per_s=2000e9)  # fmt: skip
    nic = rl.Link(50e9, 5e-6, launch_s=8e-6, timing="nccl_protocols", simple_sync_s=11.3e-6, memory_bytes_per_s=2000e9)
    two = rl.Hierarchical(rl.Switch(4, link), rl.Switch(2, nic))
    v = 1e8
    est = {c.protocol: c for c in rl.collective("all_reduce", v, two, "hierarchical").candidates}
    inside = 3 * 3.8e-6 + 3 / 4 * v / 300e9  # 3 steps of 1 + 2.8 µs, 3/4 of V
    across = 2 * (1 * 16.3e-6 + 1 / 2 * (v / 4) / 50e9)  # RS and AG of V/4 over 2 nodes: 1 step of 5 + 11.3 µs
    copies = 2 * (v / 4) / 2000e9 + 2 * (v / 8) / 2000e9 + 3 * (v / 4) / 2000e9
    assert one(est["simple"].time_s) == pytest.approx(8e-6 + 2 * inside + across + copies, rel=1e-12)
    ll_inside = 3 * 1e-6 + 3 / 4 * v / (300e9 / 4)  # LL across nodes and on all-reduces: a quarter of the bandwidth
    ll_across = 2 * (5e-6 + 1 / 2 * (v / 4) / (50e9 / 4))
    assert one(est["ll"].time_s) == pytest.approx(8e-6 + 2 * ll_inside + ll_across, rel=1e-12)
    # Bytes on the busiest link leave the copies out: 2 × 3/4 · V inside, 2 × 1/2 · V/4 across.
    assert one(est["simple"].bytes_per_link) == pytest.approx(2 * 3 / 4 * v + 2 * 1 / 2 * v / 4)


def test_library_all_to_all_moves_its_self_round_through_the_channels_on_nvlink_not_over_pcie() -> None:
    # nccl-tests' alltoall posts a send and a receive for every rank, itself included; NCCL runs the n rounds on equal
    # shares of its channels and on NVLink the channels set the rate, so the call costs the whole buffer V at the
    # link's rate whatever n: 256 MiB over 600 GB/s on 2 GPUs, Simple (1 handshake of 1 + 2.8 µs, 8 µs launch).
    # Over the host's PCIe the link binds: (n − 1)/n of it. An alpha-beta switch (no library) keeps (n − 1)/n too.
    v = 256 * 2**20
    nvlink = rl.Link(600e9, 1e-6, launch_s=8e-6, timing="nccl_protocols", simple_sync_s=2.8e-6)
    pcie = rl.Link(600e9, 1e-6, launch_s=8e-6, timing="nccl_protocols", simple_sync_s=2.8e-6, fabric="host")
    plain = rl.Link(600e9, 1e-6)
    assert one(rl.collective("all_to_all", v, rl.Switch(2, nvlink), "direct").time_s) == pytest.approx(
        8e-6 + 3.8e-6 + v / 600e9
    )
    assert one(rl.collective("all_to_all", v, rl.Switch(2, pcie), "direct").time_s) == pytest.approx(
        8e-6 + 3.8e-6 + v / 2 / 600e9
    )
    assert one(rl.collective("all_to_all", v, rl.Switch(8, plain), "direct").time_s) == pytest.approx(
        7 * 1e-6 + 7 / 8 * v / 600e9
    )
