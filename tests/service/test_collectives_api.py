"""POST /v1/estimate/collective over HTTP, on SQLite and PostgreSQL.

Expected numbers are worked out by hand from the catalogue (hardware_db/hardware/a100-sxm-80gb.yaml: NVSwitch,
300e9 B/s per GPU per direction, 1 µs per step, 8 GPUs per domain, interconnect efficiency 0.78, no scale-out) and the
core's GPU library constants (roofline/_collectives.py: 8 µs per call; the Simple protocol adds 2.8 µs per step;
LL reaches NCCL's 1/3 of a ring's bus bandwidth, 1/4 for all-reduce, and half the bytes point to point).
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

import adapters
from service.examples import COLLECTIVE_EXAMPLES

A100 = "a100-sxm-80gb"
B = 300e9 * 0.78  # bytes/s each A100 moves per direction in a large collective
M = 2039e9 * 0.90  # the A100's HBM2e at its memory efficiency: what NCCL's Simple ring copies its staged chunk through
CALL, HOP, SIMPLE = 8e-6, 1e-6, 1e-6 + 2.8e-6


def post(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/estimate/collective", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def error(client: TestClient, body: dict[str, Any], status: int = 422) -> dict[str, Any]:
    response = client.post("/v1/estimate/collective", json=body)
    assert response.status_code == status, response.text
    result: dict[str, Any] = response.json()
    assert set(result) == {"error", "message", "detail"}
    return result


def test_ring_all_reduce_on_an_a100_node(client: TestClient) -> None:
    r = post(client, {"op": "all_reduce", "bytes": 16e6, "hardware": A100, "devices": 8, "algorithm": "ring"})
    # Simple protocol: 2(n−1) = 14 steps of 3.8 µs, then 2·7/8 of 16 MB at 234 GB/s (119.7 µs), and one chunk
    # (16 MB / 8) per rank read and written through device memory (2 · 2 MB / 1.835 TB/s = 2.18 µs).
    expected = CALL + 14 * SIMPLE + 2 * 7 / 8 * 16e6 / B + 2 * 16e6 / 8 / M
    assert r["time_s"] == pytest.approx(expected)
    assert r["time_s"] == pytest.approx(183.04e-6, rel=1e-4)
    assert r["algbw_bytes_per_s"] == pytest.approx(16e6 / expected)
    assert r["busbw_bytes_per_s"] == pytest.approx(16e6 / expected * 2 * 7 / 8)
    assert (r["algorithm"], r["protocol"], r["bound"], r["steps"]) == ("ring", "simple", "bandwidth", 14)
    assert [p["name"] for p in r["schedule"]] == ["reduce_scatter", "all_gather", "buffer copy"]
    assert r["bytes_per_link"] == pytest.approx(2 * 7 / 8 * 16e6)
    assert "DTB" in r["source"] and "2(n−1)/n" in r["formula"]
    assumptions = r["assumptions"]
    assert assumptions["hardware"] == A100
    assert assumptions["topology"]["kind"] == "switch"
    assert assumptions["topology"]["link"]["efficiency"] == 0.78
    assert assumptions["topology"]["link"]["memory_bytes_per_s"] == pytest.approx(M)


def test_auto_names_the_fastest_algorithm(client: TestClient) -> None:
    r = post(client, {"op": "all_reduce", "bytes": 16e6, "hardware": A100, "devices": 8})
    # An A100 node's collectives are NCCL's: auto weighs the algorithms NCCL runs on one node without NVLS (the ring).
    assert r["algorithm"] == "ring"
    assert r["time_s"] == pytest.approx(183.04e-6, rel=1e-4)
    assert set(r["alternatives"]) == {"ring"}
    # TensorRT-LLM's two-shot kernel is there by name: 2 handshakes instead of 14 ring steps, the ring's bytes.
    r = post(client, {"op": "all_reduce", "bytes": 16e6, "hardware": A100, "devices": 8, "algorithm": "direct"})
    assert r["time_s"] == pytest.approx(CALL + 2 * SIMPLE + 2 * 7 / 8 * 16e6 / B)  # one-shot copies: no ring buffer
    # NCCL's all-to-all is grouped point-to-point sends: one handshake per peer, (n−1)/n of the buffer.
    r = post(client, {"op": "all_to_all", "bytes": 16e6, "hardware": A100, "devices": 8})
    assert (r["algorithm"], r["steps"]) == ("direct", 7)


def test_small_messages_take_the_low_latency_protocol(client: TestClient) -> None:
    r = post(client, {"op": "all_gather", "bytes": 4096, "hardware": A100, "devices": 8, "algorithm": "ring"})
    # LL: 7 steps of 1 µs at a third of the ring's bus bandwidth (NCCL's tuning model): 7/8 · 4096 / (B/3).
    assert r["time_s"] == pytest.approx(CALL + 7 * HOP + 7 / 8 * 4096 / (B / 3))
    assert (r["protocol"], r["bound"]) == ("ll", "latency")


def test_more_gpus_than_a_node_form_a_two_level_hierarchy(client: TestClient) -> None:
    r = post(client, {"op": "all_reduce", "bytes": 256e6, "hardware": "h100-sxm", "devices": 16})
    topology = r["assumptions"]["topology"]
    assert topology["kind"] == "hierarchical"
    assert (topology["inner"]["devices"], topology["outer"]["devices"]) == (8, 2)
    assert r["algorithm"] in {"hierarchical", "ring"}
    assert set(r["alternatives"]) == {"hierarchical", "ring"}


def test_hardware_patch_changes_the_fabric(client: TestClient) -> None:
    body = {"op": "all_gather", "bytes": 1e9, "hardware": A100, "devices": 8, "algorithm": "ring"}
    base = post(client, body)
    patch = {"interconnect": {"scale_up": {"bandwidth_per_direction_bytes_per_s": 600e9}}}
    faster = post(client, {**body, "hardware_patch": patch})
    # The link's 7/8 of 1 GB, and the ring buffer's chunk (1 GB / 8) copied through HBM, which the patch leaves alone:
    # read, and written to the output and the send buffer (3 streams, NCCL's all-gather `directCopySend`).
    copy = 3 * 1e9 / 8 / M
    assert base["bandwidth_s"] == pytest.approx(7 / 8 * 1e9 / B + copy)
    assert faster["bandwidth_s"] == pytest.approx(7 / 8 * 1e9 / (600e9 * 0.78) + copy)
    assert faster["assumptions"]["hardware"] == f"{A100} (patched)"
    tuned = post(client, {**body, "efficiency": 0.5, "launch_s": 0})
    assert tuned["bandwidth_s"] == pytest.approx(7 / 8 * 1e9 / (300e9 * 0.5) + copy)


def test_explicit_torus_axis(client: TestClient) -> None:
    r = post(client, COLLECTIVE_EXAMPLES["torus-axis"].get("value") or {})
    # One wraparound axis of 16: (k−1)/k · V / W_bidi with W_bidi = 2 × 50 GB/s.
    assert r["time_s"] == pytest.approx(15 / 16 * 1e9 / 100e9)
    assert r["busbw_bytes_per_s"] == pytest.approx(100e9)
    assert (r["protocol"], r["devices"], r["steps"]) == ("hardware", 16, 8)
    assert "SB-SH" in r["source"]


def test_explicit_ring_and_hierarchy(client: TestClient) -> None:
    ring = {"kind": "ring", "devices": 8, "bidirectional": False}
    base = {"op": "all_gather", "bytes": 1e9, "link_bandwidth_bytes_per_s": 100e9, "hop_latency_s": 1e-6}
    one_way = post(client, {**base, "topology": ring})
    both = post(client, {**base, "topology": {**ring, "bidirectional": True}})
    assert one_way["time_s"] == pytest.approx(7 / 8 * 1e9 / 100e9)
    assert both["time_s"] == pytest.approx(one_way["time_s"] / 2)
    r = post(client, COLLECTIVE_EXAMPLES["hierarchical"].get("value") or {})
    # RS and AG inside (7/8 of 1 GB at 300 GB/s, 7 µs each), AR of 1/8 across 4 nodes at 25 GB/s per GPU (3+3 steps).
    expected = 2 * (7e-6 + 7 / 8 * 1e9 / 300e9) + 6 * 5e-6 + 2 * 3 / 4 * 1e9 / 8 / 25e9
    assert r["time_s"] == pytest.approx(expected)
    assert r["algorithm"] == "hierarchical"


@pytest.mark.parametrize("name", sorted(COLLECTIVE_EXAMPLES))
def test_swagger_examples_run(client: TestClient, name: str) -> None:
    post(client, COLLECTIVE_EXAMPLES[name].get("value") or {})


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"op": "all_reduce", "bytes": 1e6, "hardware": A100, "devices": 16}, "body.devices"),
        ({"op": "all_reduce", "bytes": -1, "hardware": A100, "devices": 8}, "body.bytes"),
        ({"op": "all_reduce", "bytes": "NaN", "hardware": A100, "devices": 8}, "body.bytes"),
        ({"op": "all_sum", "bytes": 1e6, "hardware": A100, "devices": 8}, "body.op"),
        ({"op": "all_reduce", "bytes": 1e6, "hardware": A100, "devices": 1}, "body.devices"),
        ({"op": "all_reduce", "bytes": 1e6, "hardware": A100}, "body"),
        ({"op": "all_reduce", "bytes": 1e6, "hardware": A100, "devices": 6, "algorithm": "halving_doubling"},
         "body.algorithm"),
        ({"op": "all_reduce", "bytes": 1e6, "hardware": A100, "devices": 8, "algorithm": "in_switch"},
         "body.algorithm"),
        ({"op": "all_reduce", "bytes": 1e6, "hardware": A100, "devices": 8, "hop_latency_s": 1e-6},
         "body.hop_latency_s"),
        ({"op": "all_reduce", "bytes": 1e6, "topology": {"kind": "ring", "devices": 8}, "hop_latency_s": 1e-6},
         "body.link_bandwidth_bytes_per_s"),
        ({"op": "all_reduce", "bytes": 1e6, "topology": {"kind": "torus", "devices": 8}}, "body.topology"),
        ({"op": "all_reduce", "bytes": 1e6, "topology": {"kind": "mobius", "devices": 8}}, "body.topology.kind"),
        ({"op": "all_gather", "bytes": 1e6, "link_bandwidth_bytes_per_s": 1e9, "hop_latency_s": 0,
          "topology": {"kind": "torus", "axes": [{"size": 4}, {"size": 4}], "collective_axes": [3]}},
         "body.topology.collective_axes"),
        ({"op": "all_gather", "bytes": 1e6, "topology": {"kind": "hierarchical",
          "inner": {"kind": "switch", "devices": 8, "link_bandwidth_bytes_per_s": 1e9, "hop_latency_s": 0},
          "outer": {"kind": "switch", "devices": 2, "hop_latency_s": 0}}},
         "body.topology.outer.link_bandwidth_bytes_per_s"),
        ({"op": "all_reduce", "bytes": 1e6, "hardware": A100, "devices": 8,
          "topology": {"kind": "ring", "devices": 8}}, "body"),
        ({"op": "all_reduce", "bytes": 1e6, "hardware": A100, "devices": 8,
          "hardware_patch": {"interconnect": {"scale_up": {"hop_latency_s": -1}}}},
         "body.hardware_patch.interconnect.scale_up.hop_latency_s"),
    ],
)  # fmt: skip
def test_bad_input_is_a_422_naming_the_field(client: TestClient, body: dict[str, Any], field: str) -> None:
    result = error(client, body)
    assert result["error"] == "validation_error"
    assert field in [d["field"] for d in result["detail"]], result


def test_an_inline_profile_error_names_the_field_as_sent(client: TestClient) -> None:
    profile = client.get(f"/v1/hardware/{A100}").json()
    for key in ("builtin", "version", "created_at", "updated_at"):
        profile.pop(key)
    profile["interconnect"]["scale_up"]["bandwidth_per_direction_bytes_per_s"] = 0
    result = error(client, {"op": "all_reduce", "bytes": 1e6, "hardware": profile, "devices": 8})
    assert "body.hardware.interconnect.scale_up.bandwidth_per_direction_bytes_per_s" in [
        d["field"] for d in result["detail"]
    ]


def test_an_unknown_profile_is_a_404(client: TestClient) -> None:
    result = error(client, {"op": "all_reduce", "bytes": 1e6, "hardware": "nope", "devices": 8}, status=404)
    assert result["error"] == "not_found"


def test_the_route_is_documented(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    route = spec["paths"]["/v1/estimate/collective"]["post"]
    assert route["summary"].startswith("Estimate a collective")
    assert {"422", "404"} <= set(route["responses"])
    body = spec["components"]["schemas"]["CollectiveRequest"]
    assert "nccl-tests" in body["properties"]["bytes"]["description"]


@pytest.mark.parametrize(
    ("hardware", "devices", "size", "regime"),
    [
        ("a100-sxm-80gb", 8, 16e6, "scale_up-bandwidth"),  # inside the NVSwitch node
        ("a100-sxm-80gb", 8, 64e3, "scale_up-latency"),
        ("h100-sxm", 16, 256e6, "scale_out-bandwidth"),  # two nodes: InfiniBand binds
        ("l40s", 4, 16e6, "host-bandwidth"),  # no NVLink: the host's PCIe
    ],
)
def test_a_collective_carries_the_band_of_its_fabric_class_and_size(
    client: TestClient, hardware: str, devices: int, size: float, regime: str
) -> None:
    got = post(client, {"op": "all_reduce", "bytes": size, "hardware": hardware, "devices": devices})
    assert got["assumptions"]["interval"]["band"] == f"collectives, {regime}"
    band = adapters.interval_table().band("collective", regime)[1]  # the shipped table, bench.intervals' output
    assert got["time_s_p10"] == pytest.approx(got["time_s"] * min(band.low, 1.0), rel=1e-12)
    assert got["time_s_p90"] == pytest.approx(got["time_s"] * max(band.high, 1.0), rel=1e-12)
    assert got["time_s_p10"] <= got["time_s"] < got["time_s_p90"]
