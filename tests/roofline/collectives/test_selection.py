"""Choosing a collective's algorithm and protocol (`roofline.collective`): nccl-tests' bus bandwidth, the fastest
candidate per size, what a library fabric runs under `auto`, and inputs refused with the reason."""

from __future__ import annotations

import numpy as np
import pytest

import roofline as rl

W = 50e9  # one ICI link, per direction (TPU v5e: 400 GBps bidirectional per chip / 4 ports / 2)
ALPHA = 1e-6  # scaling-book's ~1 µs per hop
ICI = rl.Link(W, ALPHA, timing="per_hop_max", name="ICI")


def one(x: object) -> float:
    return float(np.asarray(x))


def time(op: str, v: float, topo: rl.Topology, algorithm: str = "auto") -> float:
    return one(rl.collective(op, v, topo, algorithm).time_s)


def torus(*axes: tuple[int, bool], used: tuple[int, ...] | None = None) -> rl.Torus:
    return rl.Torus(tuple(rl.Axis(size, wrap) for size, wrap in axes), ICI, used)


@pytest.mark.parametrize(
    ("op", "factor"),
    [("all_reduce", 2 * 7 / 8), ("all_gather", 7 / 8), ("reduce_scatter", 7 / 8), ("all_to_all", 7 / 8),
     ("broadcast", 1.0), ("reduce", 1.0), ("send_recv", 1.0)],
)  # fmt: skip
def test_bus_bandwidth_uses_the_nccl_tests_factors(op: str, factor: float) -> None:
    est = rl.collective(op, 256e6, rl.Switch(8, rl.Link(300e9, 1e-6)))
    assert one(est.algbw_bytes_per_s) == pytest.approx(256e6 / one(est.time_s))
    assert one(est.busbw_bytes_per_s) == pytest.approx(one(est.algbw_bytes_per_s) * factor)


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
