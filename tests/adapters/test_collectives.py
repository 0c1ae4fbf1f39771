"""Collectives: a profile's interconnect as the core's fabrics and topology, an explicit topology with the request's
link figures, and the response (nccl-tests' bus bandwidth convention), by hand."""

from __future__ import annotations

from typing import Any

import pytest

import adapters
from schemas.collectives import CollectiveRequest
from tests.adapters.conftest import A100


def request(**fields: Any) -> CollectiveRequest:
    return CollectiveRequest.model_validate({"op": "all_reduce", "bytes": 1 << 26, **fields})


def test_the_a100s_nvswitch_is_its_scale_up_fabric() -> None:
    assert A100.interconnect.scale_up is not None
    fabric = adapters.fabric(A100.interconnect.scale_up)
    assert (fabric.kind, fabric.bandwidth_per_direction_bytes_per_s, fabric.hop_latency_s) == ("switch", 300e9, 1e-6)
    assert (fabric.domain_devices, fabric.link_bandwidth_per_direction_bytes_per_s) == (8, 25e9)
    # What a buffered ring copies through: 2039e9 B/s of HBM at the profile's 90 % memory efficiency.
    assert adapters.memory_bytes_per_s(A100) == pytest.approx(2039e9 * 0.90, rel=1e-15)


def test_devices_on_the_profiles_fabric_and_beyond_it() -> None:
    topology = adapters.device_topology(A100, 8)
    assert (type(topology).__name__, topology.devices) == ("Switch", 8)
    assert topology.link.bandwidth_bytes_per_s == 300e9 and topology.link.efficiency == 0.78
    assert adapters.device_topology(A100, 8, efficiency=0.5, launch_s=0.0).link.efficiency == 0.5
    assert adapters.device_topology(A100, 8, launch_s=0.0).link.launch_s == 0.0
    with pytest.raises(ValueError, match="no scale-out fabric"):
        adapters.device_topology(A100, 16)
    with pytest.raises(adapters.InvalidField) as raised:
        adapters.request_device_topology(request(hardware="a100-sxm-80gb", devices=16), A100)
    assert raised.value.field == "body.devices"


def test_a_bidirectional_ring_all_reduce_by_hand() -> None:
    # 8 devices, 64 MiB, 100 GB/s per direction, 1 µs per hop, one step at a time (per_hop_max): 2·(8 − 1) steps,
    # each max(1 µs, 64 MiB / 8 / (2 · 100 GB/s)) = 41.9 µs, the two directions carrying half each.
    body = request(topology={"kind": "ring", "devices": 8}, link_bandwidth_bytes_per_s=100e9, hop_latency_s=1e-6)
    read = adapters.estimate_collective(adapters.request_topology(body), None, body)
    assert read.time_s == pytest.approx(2 * 7 * (1 << 26) / 8 / (2 * 100e9), rel=1e-12)
    assert read.algbw_bytes_per_s == pytest.approx((1 << 26) / read.time_s, rel=1e-12)
    assert read.busbw_bytes_per_s == pytest.approx(read.algbw_bytes_per_s * 2 * 7 / 8, rel=1e-12)  # nccl-tests
    topology = read.assumptions["topology"]
    assert (topology["kind"], topology["devices"], topology["bidirectional"]) == ("ring", 8, True)
    assert (topology["link"]["timing"], read.assumptions["hardware"]) == ("per_hop_max", None)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"topology": {"kind": "ring", "devices": 8}, "hop_latency_s": 1e-6}, "body.link_bandwidth_bytes_per_s"),
        ({"topology": {"kind": "ring", "devices": 8}, "link_bandwidth_bytes_per_s": 1e9}, "body.hop_latency_s"),
        (
            {
                "topology": {
                    "kind": "hierarchical",
                    "inner": {"kind": "switch", "devices": 8},
                    "outer": {"kind": "ring", "devices": 2, "hop_latency_s": 5e-6},
                },
                "hop_latency_s": 1e-6,
            },
            "body.topology.inner.link_bandwidth_bytes_per_s",
        ),
    ],
    ids=["bandwidth", "latency", "inner level"],
)
def test_a_missing_figure_is_named_where_the_client_would_give_it(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(adapters.InvalidField) as raised:
        adapters.request_topology(request(**fields))
    assert raised.value.field == named


def test_a_torus_is_described_with_the_axes_it_uses() -> None:
    body = request(
        topology={"kind": "torus", "axes": [{"size": 4, "wraparound": True}, {"size": 4, "wraparound": False}]},
        link_bandwidth_bytes_per_s=45e9,
        hop_latency_s=1e-6,
    )
    described = adapters.describe_topology(adapters.request_topology(body))
    assert described["kind"] == "torus" and described["devices"] == 16
    assert described["axes"] == [{"size": 4, "wraparound": True}, {"size": 4, "wraparound": False}]
    assert described["collective_axes"] == [0, 1]  # every axis, when the request names none
