"""POST /v1/estimate/op and /v1/estimate/ops over HTTP, on SQLite and PostgreSQL.

Expected numbers are worked out by hand in each test from the catalogue figures (hardware_db/hardware/*.yaml):
A100 SXM 80GB: 312e12 bf16 matrix FLOP/s, 19.5e12 fp32 vector FLOP/s, 2039e9 B/s, 108 SMs, efficiencies matmul 0.87,
vector 0.80, memory 0.90, 5 µs per kernel. H100 SXM: 3.35e12 B/s, memory efficiency 0.90.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hardware_db import load_yaml
from hardware_db._loader import HARDWARE_DIR
from schemas.estimates import EstimateOpsRead
from service.examples import ESTIMATE_OP_EXAMPLES, ESTIMATE_OPS_EXAMPLES

A100 = "a100-sxm-80gb"
A100_BF16, A100_FP32_VECTOR, A100_BW = 312e12, 19.5e12, 2039e9
A100_EFF_MATMUL, A100_EFF_VECTOR, A100_EFF_MEMORY = 0.87, 0.80, 0.90
A100_SMS, LAUNCH_S = 108, 5e-6
H100_BW = 3.35e12


def streamed(moved: float, bandwidth: float, in_flight: float) -> float:
    """A streaming kernel's memory time: both limits combined as roofline._kernels.MEMORY_QUEUEING_NORM = 2 says,
    moved · √(1/bandwidth² + 1/in_flight²); in_flight = SMs · 2048 threads · bytes per thread / 650 ns."""
    return float(moved * ((1 / bandwidth) ** 2 + (1 / in_flight) ** 2) ** 0.5)


FIELDS = {
    "time_s", "flops", "bytes", "arithmetic_intensity", "critical_intensity", "compute_time_s", "memory_time_s",
    "overhead_s", "bound", "assumptions",
}  # fmt: skip
MATMUL_FIELDS = {"tiles", "waves", "wave_efficiency"}


def op(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/estimate/op", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def ops(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/estimate/ops", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def assert_between_the_roofs(r: dict[str, Any]) -> None:
    """Whatever the overlap model, a kernel takes at least its slowest term and at most all of them in a row."""
    terms = (r["compute_time_s"], r["memory_time_s"], r["overhead_s"])
    assert max(terms) * (1 - 1e-12) <= r["time_s"] <= sum(terms) * (1 + 1e-12)


def rejected(response: Any, status: int = 422) -> list[str]:
    """The response is an error envelope with this status; returns the fields it names (each also in the message)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "message", "detail"}
    fields = [d["field"] for d in body["detail"]]
    for field in fields[:5]:
        assert field in body["message"]
    return fields


# --- answers -------------------------------------------------------------------------------------------------------


def test_a_4096_cubed_bf16_matmul_on_an_a100_is_compute_bound(client: TestClient) -> None:
    n = 4096
    r = op(client, {"hardware": A100, "op": {"kind": "matmul", "m": n, "n": n, "k": n, "dtype": "bf16"}})
    assert set(r) >= FIELDS | MATMUL_FIELDS
    assert r["flops"] == 2 * n**3  # 2·m·n·k
    assert r["bytes"] == 2 * 3 * n**2  # A, B read and C written once, 2 bytes each
    assert r["arithmetic_intensity"] == pytest.approx(2 * n**3 / (6 * n**2))  # = n/3 ≈ 1365 FLOP/B
    assert r["critical_intensity"] == pytest.approx(A100_BF16 / A100_BW)  # ≈ 153 FLOP/B: the ridge point
    assert r["bound"] == "compute"
    assert r["unit"] == "matrix" and r["peak_flops_per_s"] == A100_BF16
    # A product streams its operands at 0.90 of the profile's achievable bandwidth (roofline.MATMUL_STREAM_EFFICIENCY).
    assert r["memory_time_s"] == pytest.approx(6 * n**2 / (A100_BW * A100_EFF_MEMORY * 0.90))
    # The tile is the library-style choice; whichever it is, tiles, waves and math time follow from it:
    # tiles = ⌈m/tm⌉·⌈n/tn⌉, waves = ⌈tiles/108⌉, one wave = 108 tiles of 2·tm·tn·k FLOPs at peak·eff.
    tm, tn = r["tile"]
    assert r["tiles"] == math.ceil(n / tm) * math.ceil(n / tn)
    assert r["waves"] == math.ceil(r["tiles"] / A100_SMS)
    assert r["wave_efficiency"] == pytest.approx(r["tiles"] / (r["waves"] * A100_SMS))
    wave_s = A100_SMS * 2 * tm * tn * n / (A100_BF16 * A100_EFF_MATMUL)
    assert r["compute_time_s"] == pytest.approx(r["waves"] * wave_s)
    assert r["compute_time_s"] >= r["flops"] / (A100_BF16 * A100_EFF_MATMUL) * (1 - 1e-12)
    assert r["overhead_s"] >= LAUNCH_S  # the launch, and whatever the model adds that overlaps nothing
    assert_between_the_roofs(r)
    assert r["achieved_flops_per_s"] == pytest.approx(r["flops"] / r["time_s"])
    assert r["assumptions"]["hardware"] == A100
    assert r["assumptions"]["efficiency"] == {"matmul": 0.87, "vector": 0.8, "memory": 0.9}


def test_a_fixed_tile_gives_the_seed_002_waves(client: TestClient) -> None:
    n = 4096
    body = {"hardware": A100, "op": {"kind": "matmul", "m": n, "n": n, "k": n, "tile": [256, 128]}}
    r = op(client, body)
    assert r["tile"] == [256, 128]
    assert r["tiles"] == 16 * 32  # ⌈4096/256⌉·⌈4096/128⌉ = 512
    assert r["waves"] == 5  # ⌈512/108⌉
    assert r["wave_efficiency"] == pytest.approx(512 / 540)
    assert r["compute_time_s"] == pytest.approx(5 * 108 * 2 * 256 * 128 * n / (A100_BF16 * A100_EFF_MATMUL))


def test_an_elementwise_op_moves_inputs_plus_outputs_and_is_memory_bound(client: TestClient) -> None:
    elements = 1 << 28
    body = {"hardware": A100, "op": {"kind": "elementwise", "elements": elements, "inputs": 2, "outputs": 1}}
    r = op(client, body)
    assert set(r) >= FIELDS
    assert r["tiles"] is None and r["waves"] is None and r["wave_efficiency"] is None
    assert r["bytes"] == elements * (2 + 1) * 2  # elements · (inputs + outputs) · 2 bytes of bf16
    assert r["flops"] == elements  # one FLOP per element by default
    # Vectorized: one 16-byte load per input in flight, 2 inputs: 108 · 2048 · 32 B / 650 ns = 10.9 TB/s.
    in_flight = A100_SMS * 2048 * 32 / 650e-9
    assert r["memory_time_s"] == pytest.approx(streamed(elements * 3 * 2, A100_BW * A100_EFF_MEMORY, in_flight))
    assert r["compute_time_s"] == pytest.approx(elements / (A100_FP32_VECTOR * A100_EFF_VECTOR))
    assert r["critical_intensity"] == pytest.approx(A100_FP32_VECTOR / A100_BW)  # bf16 math runs at the fp32 rate
    assert r["bound"] == "memory" and r["unit"] == "vector"
    assert_between_the_roofs(r)


def test_launch_overhead_floors_a_tiny_kernel_and_zero_removes_the_floor(client: TestClient) -> None:
    body: dict[str, Any] = {"hardware": A100, "op": {"kind": "elementwise", "elements": 1000}}
    floored = op(client, body)
    # 1000 elements · 2 B in + 2 B out = 4000 B: 4000 / (2039e9 · 0.9) ≈ 2.2 ns, but never less than one memory
    # round trip, 650 ns (the profile's latency): far below 5 µs.
    assert floored["memory_time_s"] == pytest.approx(650e-9)
    assert floored["overhead_s"] == LAUNCH_S and floored["time_s"] >= LAUNCH_S
    assert floored["bound"] == "overhead"
    graph = op(client, {**body, "options": {"launch_overhead_s": 0}})
    assert graph["overhead_s"] == 0
    assert graph["memory_time_s"] == floored["memory_time_s"]
    assert graph["bound"] == "memory"
    assert_between_the_roofs(graph)  # the 5 µs floor is gone: one round trip remains
    assert graph["time_s"] == pytest.approx(650e-9, rel=0.01)
    assert graph["assumptions"]["launch_overhead_s"] == 0


def test_a_warm_cache_serves_a_call_that_fits_in_l2_from_there(client: TestClient) -> None:
    """`options.cache = "warm"` (a benchmark replaying one call): a kernel whose bytes fit in the L40S's 96 MB L2 reads
    and writes them at the L2's rate, which the profile does not publish: 142 SMs × 2.52 GHz × 19 B per clock
    (roofline.L2_SHARED_READ_BYTES_PER_CLOCK_PER_UNIT) = 6.8 TB/s, × 0.90 memory efficiency. One that does not fit
    streams from GDDR6 as when cold."""
    elements = 1 << 22  # bf16 in and out: 16 MiB
    body: dict[str, Any] = {"hardware": "l40s", "op": {"kind": "elementwise", "elements": elements}}
    cold = op(client, body)
    warm = op(client, {**body, "options": {"cache": "warm"}})
    assert warm["memory_time_s"] == pytest.approx(elements * 4 / (142 * 2.52e9 * 19 * 0.90))
    assert warm["memory_time_s"] < cold["memory_time_s"] / 5  # GDDR6: 864 GB/s × 0.90 and the queueing limit
    assert (cold["assumptions"]["cache"], warm["assumptions"]["cache"]) == ("cold", "warm")
    big = {"hardware": "l40s", "op": {"kind": "elementwise", "elements": 1 << 26}}  # 256 MiB
    assert op(client, {**big, "options": {"cache": "warm"}})["time_s"] == op(client, big)["time_s"]
    assert rejected(client.post("/v1/estimate/op", json={**body, "options": {"cache": "hot"}})) == [
        "body.options.cache"
    ]


def test_options_override_efficiencies(client: TestClient) -> None:
    elements = 1 << 28
    body = {
        "hardware": A100,
        "op": {"kind": "elementwise", "elements": elements},
        "options": {"memory_efficiency": 0.5},
    }
    r = op(client, body)
    assert r["memory_time_s"] == pytest.approx(streamed(elements * 4, A100_BW * 0.5, A100_SMS * 2048 * 16 / 650e-9))
    assert r["assumptions"]["efficiency"]["memory"] == 0.5


def test_hardware_patch_to_5_tbs_scales_memory_time_by_3_35_over_5(client: TestClient) -> None:
    memory_bound = {"kind": "elementwise", "elements": 1 << 28, "inputs": 2}
    base = op(client, {"hardware": "h100-sxm", "op": memory_bound})
    patch = {"memory": {"device": {"bandwidth_bytes_per_s": 5e12}}}
    fast = op(client, {"hardware": "h100-sxm", "hardware_patch": patch, "op": memory_bound})
    assert base["bound"] == fast["bound"] == "memory"
    # Only the bandwidth changed, 3.35e12 → 5e12; the bytes in flight (132 SMs · 2048 threads · 32 B / 650 ns) did not.
    moved, in_flight = (1 << 28) * 3 * 2, 132 * 2048 * 32 / 650e-9
    assert base["memory_time_s"] == pytest.approx(streamed(moved, H100_BW * 0.9, in_flight))
    assert fast["memory_time_s"] == pytest.approx(streamed(moved, 5e12 * 0.9, in_flight))
    assert fast["time_s"] < base["time_s"]
    assert fast["bytes"] == base["bytes"] and fast["compute_time_s"] == base["compute_time_s"]
    assert fast["assumptions"]["hardware"] == "h100-sxm (patched)"
    # The catalogue entry itself is untouched.
    assert client.get("/v1/hardware/h100-sxm").json()["memory"]["device"]["bandwidth_bytes_per_s"] == H100_BW


def test_a_hardware_patch_that_breaks_the_profile_names_the_field(client: TestClient) -> None:
    patch = {"memory": {"device": {"bandwidth_bytes_per_s": -1}}}
    body = {"hardware": "h100-sxm", "hardware_patch": patch, "op": {"kind": "elementwise", "elements": 1}}
    fields = rejected(client.post("/v1/estimate/op", json=body))
    assert fields == ["body.hardware_patch.memory.device.bandwidth_bytes_per_s"]


def test_an_inline_profile_answers_like_its_catalogue_twin_and_is_not_stored(client: TestClient) -> None:
    doc = load_yaml(HARDWARE_DIR / "h100-sxm.yaml")
    doc["slug"] = "h100-inline"
    matmul = {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096}
    inline = op(client, {"hardware": doc, "op": matmul})
    builtin = op(client, {"hardware": "h100-sxm", "op": matmul})
    for field in FIELDS - {"assumptions"}:
        assert inline[field] == builtin[field], field
    assert inline["assumptions"]["hardware"] == "h100-inline"
    assert client.get("/v1/hardware/h100-inline").status_code == 404
    # Bandwidth 5e12 inline (with its own source) is the same what-if as the patch above.
    doc["memory"]["device"]["bandwidth_bytes_per_s"] = 5e12
    doc["sources"].append({"key": "WHAT-IF", "title": "Hypothetical bandwidth"})
    doc["figure_sources"]["memory.device.bandwidth_bytes_per_s"] = "WHAT-IF"
    elementwise = {"kind": "elementwise", "elements": 1 << 28}
    patched = {"memory": {"device": {"bandwidth_bytes_per_s": 5e12}}}
    assert (
        op(client, {"hardware": doc, "op": elementwise})["time_s"]
        == op(client, {"hardware": "h100-sxm", "hardware_patch": patched, "op": elementwise})["time_s"]
    )


def test_an_incomplete_inline_profile_names_its_fields(client: TestClient) -> None:
    body = {"hardware": {"slug": "half-a-gpu", "name": "Half"}, "op": {"kind": "elementwise", "elements": 1}}
    fields = rejected(client.post("/v1/estimate/op", json=body))
    assert "body.hardware.compute" in fields and "body.hardware.memory" in fields
    assert all(f.startswith("body.hardware.") for f in fields)  # no union-branch names in the paths


def test_a_list_of_ops_gives_one_item_per_op(client: TestClient) -> None:
    body = {
        "hardware": A100,
        "ops": [
            {"kind": "matmul", "m": 1024, "n": 1024, "k": 1024},
            {"kind": "elementwise", "elements": 1 << 20, "inputs": 2},
        ],
    }
    result = ops(client, body)
    assert result["grid"] is None
    first, second = result["items"]
    assert first["flops"] == 2 * 1024**3 and first["tiles"] is not None
    assert second["bytes"] == (1 << 20) * 3 * 2 and second["tiles"] is None


def test_a_fused_chain_moves_only_its_inputs_and_output(client: TestClient) -> None:
    # relu(A@B), seed 000: unfused, the matmul writes C (2N²) and relu reads and writes it (4N²): 6N² + 4N² = 10N²
    # bytes; fused, only A, B and the result: 6N².
    n = 4096
    chain = [{"kind": "matmul", "m": n, "n": n, "k": n}, {"kind": "activation", "elements": n * n, "function": "relu"}]
    fused = op(client, {"hardware": A100, "op": {"kind": "chain", "ops": chain, "fused": True}})
    unfused = op(client, {"hardware": A100, "op": {"kind": "chain", "ops": chain, "fused": False}})
    assert fused["bytes"] == 6 * n**2
    assert unfused["bytes"] == 10 * n**2
    assert fused["flops"] == unfused["flops"] == 2 * n**3 + n**2  # the matmul plus one max per element


def test_a_sweep_returns_the_grid_in_item_order(client: TestClient) -> None:
    body = {
        "hardware": A100,
        "sweep": {
            "op": {"kind": "matmul", "m": 1, "n": 1, "k": 2048},
            "vary": {"m": [64, 128, 256], "n": [512, 1024]},
        },
    }
    result = ops(client, body)
    assert len(result["items"]) == 3 * 2  # the product of the value-list lengths
    # The first varied field changes slowest, as in itertools.product.
    assert result["grid"] == {"m": [64, 64, 128, 128, 256, 256], "n": [512, 1024, 512, 1024, 512, 1024]}
    for item, m, n in zip(result["items"], result["grid"]["m"], result["grid"]["n"], strict=True):
        assert item["flops"] == 2 * m * n * 2048
        assert item["bytes"] == 2 * (m * 2048 + 2048 * n + m * n)
    # A point of a sweep is the same answer as the single estimate of that op.
    single = op(client, {"hardware": A100, "op": {"kind": "matmul", "m": 128, "n": 1024, "k": 2048}})
    assert result["items"][3] == single


def test_the_ops_response_is_exactly_the_documented_schema(client: TestClient) -> None:
    # /ops renders its JSON without building a model per item; it must still be an EstimateOpsRead, field for field.
    for example in ESTIMATE_OPS_EXAMPLES.values():
        raw = ops(client, example["value"])
        assert EstimateOpsRead.model_validate(raw).model_dump(mode="json") == raw


@pytest.mark.parametrize("name", sorted(ESTIMATE_OP_EXAMPLES))
def test_every_swagger_example_answers(client: TestClient, name: str) -> None:
    r = op(client, ESTIMATE_OP_EXAMPLES[name]["value"])
    assert r["time_s"] > 0 and r["bound"] in {"compute", "memory", "overhead"}


def test_sweeping_a_field_that_moves_only_input_bytes_gives_one_item_per_point(client: TestClient) -> None:
    attention = {"kind": "attention", "batch": 1, "heads": 32, "head_dim": 128, "q_len": 1, "kv_len": 4096}
    result = ops(client, {"hardware": A100, "sweep": {"op": attention, "vary": {"kv_heads": [1, 8, 32]}}})
    assert len(result["items"]) == 3
    first, _, last = result["items"]
    # Decode against a 4096-token cache: K and V are read at least once, 2 · kv_heads · 4096 · 128 · 2 bytes.
    assert last["bytes"] - first["bytes"] >= 2 * (32 - 1) * 4096 * 128 * 2
    embedding = {"kind": "embedding", "tokens": 8, "hidden": 4096, "vocab": 32000}
    result = ops(client, {"hardware": A100, "sweep": {"op": embedding, "vary": {"vocab": [32000, 128256]}}})
    assert len(result["items"]) == 2 and result["items"][0] == result["items"][1]


# --- bad input -----------------------------------------------------------------------------------------------------


def test_an_unknown_kind_names_body_op_kind(client: TestClient) -> None:
    response = client.post("/v1/estimate/op", json={"hardware": A100, "op": {"kind": "conv2d", "m": 1}})
    assert rejected(response) == ["body.op.kind"]
    assert "matmul" in response.json()["message"]  # the accepted kinds are listed


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"m": 0}, "body.op.m"),
        ({"m": 2**30}, "body.op.m"),
        ({"dtype": "fp7"}, "body.op.dtype"),
        ({"tile": [0, 128]}, "body.op.tile.0"),
        ({"bogus": 1}, "body.op.bogus"),
    ],
)
def test_a_bad_matmul_field_is_a_422_naming_it(client: TestClient, change: dict[str, Any], field: str) -> None:
    body = {"hardware": A100, "op": {"kind": "matmul", "m": 64, "n": 64, "k": 64, **change}}
    assert rejected(client.post("/v1/estimate/op", json=body)) == [field]


def test_an_unknown_hardware_slug_is_a_404(client: TestClient) -> None:
    response = client.post(
        "/v1/estimate/op", json={"hardware": "a100-pcie-7gb", "op": {"kind": "elementwise", "elements": 1}}
    )
    rejected(response, 404)
    assert response.json()["error"] == "not_found" and "a100-pcie-7gb" in response.json()["message"]


def test_fp8_on_an_a100_names_the_dtype(client: TestClient) -> None:
    matmul = {"kind": "matmul", "m": 64, "n": 64, "k": 64, "dtype": "fp8"}
    response = client.post("/v1/estimate/op", json={"hardware": A100, "op": matmul})
    assert rejected(response) == ["body.op.dtype"]
    assert "no fp8" in response.json()["message"]
    listed = {"hardware": A100, "ops": [{"kind": "elementwise", "elements": 1}, matmul]}
    assert rejected(client.post("/v1/estimate/ops", json=listed)) == ["body.ops.1.dtype"]
    in_chain = {"kind": "chain", "ops": [{"kind": "elementwise", "elements": 4096}, matmul]}
    assert rejected(client.post("/v1/estimate/op", json={"hardware": A100, "op": in_chain})) == ["body.op.ops.1.dtype"]


def test_a_chain_whose_matmul_does_not_fit_the_previous_output_names_that_op(client: TestClient) -> None:
    chain = {
        "kind": "chain",
        "ops": [{"kind": "elementwise", "elements": 100}, {"kind": "matmul", "m": 64, "n": 64, "k": 64}],
    }
    assert rejected(client.post("/v1/estimate/op", json={"hardware": A100, "op": chain})) == ["body.op.ops.1"]


def test_kv_heads_must_divide_heads(client: TestClient) -> None:
    attention = {"kind": "attention", "batch": 1, "heads": 32, "kv_heads": 5, "head_dim": 128, "q_len": 1, "kv_len": 64}
    assert rejected(client.post("/v1/estimate/op", json={"hardware": A100, "op": attention})) == ["body.op.kv_heads"]
    del attention["kv_heads"]
    swept = {"hardware": A100, "sweep": {"op": attention, "vary": {"kv_heads": [8, 5]}}}
    assert rejected(client.post("/v1/estimate/ops", json=swept)) == ["body.sweep.vary.kv_heads"]
    # Each value alone is fine for heads = 32; the combination heads = 12, kv_heads = 8 is not.
    swept = {"hardware": A100, "sweep": {"op": attention, "vary": {"heads": [32, 12], "kv_heads": [8]}}}
    assert rejected(client.post("/v1/estimate/ops", json=swept)) == ["body.sweep.vary.kv_heads"]
    longer = {**attention, "q_len": 128}
    assert rejected(client.post("/v1/estimate/op", json={"hardware": A100, "op": longer})) == ["body.op.kv_len"]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"hardware": "a100-sxm-80gb", "op": {"kind": "elementwise", "elements": 8, "flops_per_element": NaN}}',
         "body.op.flops_per_element"),
        ('{"hardware": "a100-sxm-80gb", "options": {"launch_overhead_s": NaN}, "op": {"kind": "elementwise", '
         '"elements": 8}}', "body.options.launch_overhead_s"),
        ('{"hardware": "a100-sxm-80gb", "sweep": {"op": {"kind": "elementwise", "elements": 8}, "vary": '
         '{"flops_per_element": [1, Infinity]}}}', "body.sweep.vary.flops_per_element.1"),
    ],
)  # fmt: skip
def test_nan_and_infinity_are_rejected(client: TestClient, raw: str, field: str) -> None:
    # Python's JSON parser accepts NaN and Infinity; the schemas must not.
    path = "/v1/estimate/ops" if '"sweep"' in raw else "/v1/estimate/op"
    response = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert rejected(response) == [field]


def test_sweeping_a_non_numeric_or_unknown_field_is_a_422(client: TestClient) -> None:
    matmul = {"kind": "matmul", "m": 64, "n": 64, "k": 64}
    for name, values in (("dtype", [1, 2]), ("tile", [128]), ("fuse_epilogue", [0, 1]), ("elements", [1])):
        body = {"hardware": A100, "sweep": {"op": matmul, "vary": {name: values}}}
        response = client.post("/v1/estimate/ops", json=body)
        assert rejected(response) == [f"body.sweep.vary.{name}"], name
        assert "not a numeric field of a matmul op" in response.json()["message"]


def test_swept_values_are_held_to_the_field_bounds(client: TestClient) -> None:
    body = {
        "hardware": A100,
        "sweep": {"op": {"kind": "matmul", "m": 64, "n": 64, "k": 64}, "vary": {"m": [64, 0, 2.5]}},
    }
    assert rejected(client.post("/v1/estimate/ops", json=body)) == ["body.sweep.vary.m.1", "body.sweep.vary.m.2"]
    body["sweep"]["vary"] = {"m": []}  # type: ignore[index]
    assert rejected(client.post("/v1/estimate/ops", json=body)) == ["body.sweep.vary.m"]


def test_a_grid_over_100_000_points_is_refused(client: TestClient) -> None:
    vary = {"m": list(range(1, 402)), "n": list(range(1, 251))}  # 401 · 250 = 100 250 points
    body = {"hardware": A100, "sweep": {"op": {"kind": "matmul", "m": 1, "n": 1, "k": 64}, "vary": vary}}
    response = client.post("/v1/estimate/ops", json=body)
    assert rejected(response) == ["body.sweep.vary"]
    assert "100250 points" in response.json()["message"]


def test_chains_cannot_be_swept(client: TestClient) -> None:
    chain = {"kind": "chain", "ops": [{"kind": "elementwise", "elements": 64}]}
    body = {"hardware": A100, "sweep": {"op": chain, "vary": {"elements": [64, 128]}}}
    assert rejected(client.post("/v1/estimate/ops", json=body)) == ["body.sweep.op.kind"]


def test_ops_and_sweep_are_exclusive(client: TestClient) -> None:
    matmul = {"kind": "matmul", "m": 64, "n": 64, "k": 64}
    both = {"hardware": A100, "ops": [matmul], "sweep": {"op": matmul, "vary": {"m": [1]}}}
    response = client.post("/v1/estimate/ops", json=both)
    assert rejected(response) == ["body"]
    assert "exactly one of `ops` and `sweep`" in response.json()["message"]
    assert rejected(client.post("/v1/estimate/ops", json={"hardware": A100})) == ["body"]


def test_a_bad_op_in_a_list_is_named_by_its_index(client: TestClient) -> None:
    body = {"hardware": A100, "ops": [{"kind": "elementwise", "elements": 1}, {"kind": "matmul", "m": 1, "n": 1}]}
    assert rejected(client.post("/v1/estimate/ops", json=body)) == ["body.ops.1.k"]


def test_malformed_json_is_a_422_envelope(client: TestClient) -> None:
    response = client.post("/v1/estimate/ops", content="{", headers={"content-type": "application/json"})
    rejected(response)
    assert json.loads(response.text)["error"] == "validation_error"


# --- memory access, XLA ALU costs, recomputation ---------------------------------------------------------------------


def test_a_scalar_kernel_runs_at_the_bandwidth_its_loads_in_flight_allow(client: TestClient) -> None:
    rows, cols = 4096, 8192
    body: dict[str, Any] = {"hardware": A100, "op": {"kind": "rmsnorm", "rows": rows, "cols": cols, "dtype": "fp16"}}
    moved = 2 * rows * cols * 2 + cols * 2  # x in, y out, the scale vector
    bw = A100_BW * A100_EFF_MEMORY
    in_flight = A100_SMS * 2048 * 2 / 650e-9  # Little's law: 2-byte loads, one per resident thread, 650 ns: 680.6 GB/s
    vectorized = op(client, body)
    # Both limits combined as roofline._kernels.MEMORY_QUEUEING_NORM = 2 says: moved · √(1/bw² + 1/in_flight²).
    assert vectorized["memory_time_s"] == pytest.approx(moved * ((1 / bw) ** 2 + (1 / (8 * in_flight)) ** 2) ** 0.5)
    scalar = op(client, {**body, "op": {**body["op"], "memory_access": "scalar"}})
    assert scalar["memory_time_s"] == pytest.approx(moved * ((1 / bw) ** 2 + (1 / in_flight) ** 2) ** 0.5)
    assert scalar["bytes"] == vectorized["bytes"] == moved


def test_an_xla_tanh_is_costed_from_the_measured_table_and_turns_compute_bound(client: TestClient) -> None:
    n = 1 << 26
    body = {
        "hardware": A100,
        "op": {"kind": "elementwise", "elements": n, "flops_per_element": 0, "functions": ["tanh"]},
    }
    r = op(client, body)
    assert r["flops"] == 504 * n  # XLA sm_80 tanh F32: 504 per element (bf16 math runs in f32)
    assert r["compute_time_s"] == pytest.approx(504 * n / (A100_FP32_VECTOR * A100_EFF_VECTOR))
    assert r["bound"] == "compute"
    assert r["assumptions"]["alu_costs"] == ["xla sm_80 tanh F32"]
    bad = {**body, "op": {**body["op"], "functions": ["tanh", "softplus"]}}
    assert rejected(client.post("/v1/estimate/op", json=bad)) == ["body.op.functions.1"]


def test_recomputing_three_sigmoids_moves_five_eighths_of_storing_them(client: TestClient) -> None:
    n = 1 << 22
    sigmoid = {"kind": "activation", "elements": n, "function": "sigmoid"}
    chain: dict[str, Any] = {"kind": "chain", "ops": [sigmoid] * 3, "fused": True}
    store = op(client, {"hardware": A100, "op": {**chain, "backward": "store"}})
    recompute = op(client, {"hardware": A100, "op": {**chain, "backward": "recompute"}})
    assert store["bytes"] == 8 * 2 * n and recompute["bytes"] == 5 * 2 * n  # seed 002: 8 accesses vs 5
    assert recompute["time_s"] < store["time_s"]
    unfused = client.post(
        "/v1/estimate/op", json={"hardware": A100, "op": {**chain, "fused": False, "backward": "recompute"}}
    )
    assert rejected(unfused) == ["body.op"]
    with_matmul = {"kind": "chain", "ops": [{"kind": "matmul", "m": 64, "n": 64, "k": 64}], "backward": "store"}
    assert rejected(client.post("/v1/estimate/op", json={"hardware": A100, "op": with_matmul})) == ["body.op"]


def test_a_list_evaluated_in_groups_equals_each_op_on_its_own(client: TestClient) -> None:
    """`ops` groups ops of one kind and settings into one vectorised call; every item must still be exactly what
    /v1/estimate/op says for that op alone, in the order given."""
    listed: list[dict[str, Any]] = [
        {"kind": "matmul", "m": 1792, "n": 1792, "k": 1792, "tile": [256, 128]},
        {"kind": "rmsnorm", "rows": 4096, "cols": 4096, "memory_access": "scalar"},
        {"kind": "matmul", "m": 1793, "n": 1793, "k": 1793, "tile": [256, 128]},
        {"kind": "matmul", "m": 64, "n": 4096, "k": 4096, "dtype": "fp16"},
        {"kind": "attention", "batch": 8, "heads": 32, "kv_heads": 8, "head_dim": 128, "q_len": 1, "kv_len": 4096},
        {"kind": "rmsnorm", "rows": 1, "cols": 4096},
        {"kind": "attention", "batch": 8, "heads": 32, "head_dim": 128, "q_len": 1, "kv_len": 4096},
        {"kind": "chain", "ops": [{"kind": "activation", "elements": 1 << 20, "function": "gelu"}] * 2},
        {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "epilogue": ["relu"]},
        {"kind": "matmul", "m": 128, "n": 128, "k": 128},
    ]
    items = ops(client, {"hardware": A100, "ops": listed})["items"]
    assert len(items) == len(listed)
    for item, single in zip(items, listed, strict=True):
        alone = op(client, {"hardware": A100, "op": single})
        assert item == alone
    assert items[0]["tiles"] == 98 and items[0]["waves"] == 1  # seed 002: 1792³ on 256×128 tiles, 108 SMs
    assert items[2]["tiles"] == 120 and items[2]["waves"] == 2  # 1793³, in its place in the list


def test_an_error_in_a_group_names_its_first_op(client: TestClient) -> None:
    listed = [{"kind": "elementwise", "elements": 8}, {"kind": "matmul", "m": 8, "n": 8, "k": 8, "dtype": "fp8"}]
    response = client.post("/v1/estimate/ops", json={"hardware": A100, "ops": listed * 2})
    assert rejected(response) == ["body.ops.1.dtype"]  # the A100 has no fp8 peak


# --- fp32 matmul precision -----------------------------------------------------------------------------------------


def test_an_fp32_matmul_runs_at_the_precision_it_asks_for(client: TestClient) -> None:
    """8192³ fp32 on an H100 (catalogue: TF32 494.5, bf16 989 dense, fp32 CUDA cores 67 TF/s): JAX's default
    precision runs it on the TF32 tensor cores, `highest` (PyTorch's default) on the CUDA cores, `bf16x3` as three
    bf16 products (989 / 3). Large full waves: the math times stand in the ratio of those rates."""

    def estimate(**extra: str) -> dict[str, Any]:
        matmul = {"kind": "matmul", "m": 8192, "n": 8192, "k": 8192, "dtype": "fp32", **extra}
        return op(client, {"hardware": "h100-sxm", "op": matmul})

    unset, default = estimate(), estimate(precision="default")
    highest, bf16x3 = estimate(precision="highest"), estimate(precision="bf16x3")
    assert unset == default and default["assumptions"]["algorithm"] == "tf32"
    assert highest["assumptions"]["algorithm"] == "fp32" and bf16x3["assumptions"]["algorithm"] == "bf16x3"
    assert highest["compute_time_s"] / default["compute_time_s"] == pytest.approx(494.5 / 67, rel=0.02)
    assert bf16x3["compute_time_s"] / default["compute_time_s"] == pytest.approx(494.5 / (989 / 3), rel=0.02)
    small = {"kind": "matmul", "m": 64, "n": 64, "k": 64, "precision": "highest"}
    assert op(client, {"hardware": "h100-sxm", "op": small})["assumptions"]["algorithm"] == "bf16"  # fp32 only


def test_a_precision_the_device_cannot_run_names_body_op_precision(client: TestClient) -> None:
    matmul = {"kind": "matmul", "m": 64, "n": 64, "k": 64, "dtype": "fp32", "precision": "tf32"}
    response = client.post("/v1/estimate/op", json={"hardware": "v100-sxm2-32gb", "op": matmul})
    assert rejected(response) == ["body.op.precision"] and "no tf32 matrix rate" in response.json()["message"]
    response = client.post("/v1/estimate/op", json={"hardware": A100, "op": {**matmul, "precision": "high"}})
    assert rejected(response) == ["body.op.precision"]
    assert "'default', 'tf32', 'bf16x3' or 'highest'" in response.json()["message"]


# --- quantised products ---------------------------------------------------------------------------------------------


def test_a_quantised_matmul_adds_its_input_quantisation_and_runs_at_the_narrow_rate(client: TestClient) -> None:
    """4096 × 8192 bf16 into dynamic per-tensor fp8 on an H100 (catalogue: 3.35 TB/s, 50 MB L2, fp8 1979 TF/s): the
    64 MiB input misses L2, so the amax pass and the quantise pass read 2 · 2 B and write 1 B per element from device
    memory; the product reads A and the weights at 1 B. Five kernels: amax, quantise, memset, scale cast, GEMM."""
    matmul = {"kind": "matmul", "m": 4096, "n": 1024, "k": 8192, "quantization": "fp8_tensor"}
    q = op(client, {"hardware": "h100-sxm", "op": matmul})
    narrow = {**matmul, "quantization": "none", "dtype": "fp8", "out_dtype": "bf16"}
    plain = op(client, {"hardware": "h100-sxm", "op": narrow})
    m, k = 4096, 8192
    # amax's fp32 value, the scale, and the memset and the cast each reading and writing one 4-byte value
    assert q["bytes"] - plain["bytes"] == 5 * m * k + 4 + 4 + 2 * (4 + 4)
    assert q["flops"] > plain["flops"] and q["time_s"] > plain["time_s"]
    assert q["assumptions"]["algorithm"] == "fp8_tensor"


def test_a_quantisation_the_device_or_dtype_cannot_run_names_body_op_quantization(client: TestClient) -> None:
    matmul = {"kind": "matmul", "m": 64, "n": 64, "k": 64, "quantization": "nvfp4"}
    response = client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": matmul})
    assert rejected(response) == ["body.op.quantization"] and "no fp4 peak" in response.json()["message"]
    response = client.post("/v1/estimate/op", json={"hardware": "b200", "op": {**matmul, "dtype": "fp8"}})
    assert rejected(response) == ["body.op.quantization"] and "bf16 or fp16" in response.json()["message"]
    response = client.post("/v1/estimate/op", json={"hardware": "b200", "op": {**matmul, "quantization": "int3"}})
    assert rejected(response) == ["body.op.quantization"]
    # a bad dtype is named once, at dtype (the quantization rule needs a valid dtype to judge)
    response = client.post("/v1/estimate/op", json={"hardware": "b200", "op": {**matmul, "dtype": "fp7"}})
    assert rejected(response) == ["body.op.dtype"]
    # a quantised matmul runs its own kernels: it is not a member of a fused chain
    norm = {"kind": "rmsnorm", "rows": 64, "cols": 64}
    chain = {"kind": "chain", "ops": [norm, {**matmul, "quantization": "fp8_tensor"}]}
    response = client.post("/v1/estimate/op", json={"hardware": "b200", "op": chain})
    assert rejected(response) == ["body.op.ops.1.quantization"]


# --- mixture-of-experts layers --------------------------------------------------------------------------------------


def test_a_moe_layer_is_seven_kernels_over_the_pairs_routed_to_the_device(client: TestClient) -> None:
    """DeepSeek-V3's experts (hidden 7 168, width 2 048, top-8 of 256) over 8 devices, 1 024 tokens, balanced: 1 024
    pairs on this device, 32 per local expert; FLOPs: routing 2 per logit, expand 1 per element, gate/up 2·P·2w·h,
    SwiGLU 4 per element, down 2·P·w·h, finalize 2·k per output element. On an H100 (TMA warp-specialised grouped
    GEMMs) a seventh kernel sets up the GEMMs' per-expert layouts (no FLOPs); an A100 runs six."""
    moe = {"kind": "moe", "tokens": 1024, "hidden": 7168, "inter": 2048, "top_k": 8, "experts": 256, "expert": 8,
           "routing": "balanced"}  # fmt: skip
    est = op(client, {"hardware": "h100-sxm", "op": moe})
    t, h, w, k, e, pairs = 1024, 7168, 2048, 8, 256, 1024
    flops = 2 * t * e + pairs * h + 2 * pairs * 2 * w * h + 4 * pairs * w + 2 * pairs * w * h + 2 * k / 8 * t * h
    assert est["flops"] == pytest.approx(flops)
    assert est["assumptions"]["kernels"] == 7
    assert op(client, {"hardware": "a100-sxm-80gb", "op": moe})["assumptions"]["kernels"] == 6
    # 8 192 tokens: the most-loaded rank of a power-law routing computes more pairs than a balanced one
    big = {**moe, "tokens": 8192}
    skewed = op(client, {"hardware": "h100-sxm", "op": {**big, "routing": "power_law", "alpha": 1.2}})
    assert skewed["flops"] > op(client, {"hardware": "h100-sxm", "op": big})["flops"]


def test_a_moe_layer_names_its_bad_field(client: TestClient) -> None:
    moe = {"kind": "moe", "tokens": 16, "hidden": 1024, "inter": 512, "top_k": 8, "experts": 64}
    bad = [
        ({**moe, "experts": 4}, "body.op.experts"),
        ({**moe, "expert": 3}, "body.op.expert"),
        ({**moe, "routing": "zipf"}, "body.op.routing"),
        ({**moe, "alpha": 0.5}, "body.op.alpha"),
        ({**moe, "dtype": "fp8", "quantization": "fp8_tensor"}, "body.op.quantization"),
    ]
    for body, field in bad:
        assert rejected(client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": body})) == [field]
    response = client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": {**moe, "quantization": "nvfp4"}})
    assert rejected(response) == ["body.op.quantization"] and "no fp4 peak" in response.json()["message"]
    sweep = {"hardware": "h100-sxm", "sweep": {"op": moe, "vary": {"experts": [64, 4]}}}
    assert rejected(client.post("/v1/estimate/ops", json=sweep)) == ["body.sweep.vary.experts"]


def test_a_sliding_window_needs_a_causal_mask_and_shortens_a_decode_step(client: TestClient) -> None:
    attention = {"kind": "attention", "batch": 8, "heads": 32, "kv_heads": 8, "head_dim": 128, "q_len": 1}
    local = {**attention, "kv_len": 16_384, "window": 128, "causal": False}
    assert rejected(client.post("/v1/estimate/op", json={"hardware": A100, "op": local})) == ["body.op.window"]
    # A decode step through a window of 128 keys is one over a 128-key cache (roofline.causal_pairs).
    times = [
        client.post("/v1/estimate/op", json={"hardware": A100, "op": op}).json()["time_s"]
        for op in ({**local, "causal": True}, {**attention, "kv_len": 128})
    ]
    assert times[0] == times[1]


# --- prediction intervals ------------------------------------------------------------------------------------------

INTERVALS = json.loads((HARDWARE_DIR.parents[1] / "adapters" / "intervals.json").read_text())["bands"]


def _expected_interval(item: dict[str, Any], family: str) -> tuple[float, float]:
    """time_s × the shipped table's p10 and p90 ratios for the op's family and regime (work = time − fixed cost under
    10 µs: small; else the larger of math and memory time), the interval widened to hold time_s. A band measured on
    fewer than three devices (rmsnorm: the A100 alone; NVFP4: B200 and RTX Pro 6000) takes the wider bounds of its own
    and of its regime's band over every family (roofline.intervals.MIN_DEVICES)."""
    work = item["time_s"] - item["overhead_s"]
    regime = "small" if work < 10e-6 else ("compute" if item["compute_time_s"] >= item["memory_time_s"] else "memory")
    band = INTERVALS[f"{family}/{regime}"]
    low, high = band["low"], band["high"]
    if family != "*" and band["devices"] < 3:
        pooled = INTERVALS[f"*/{regime}"]
        low, high = min(low, pooled["low"]), max(high, pooled["high"])
    return item["time_s"] * min(low, 1.0), item["time_s"] * max(high, 1.0)


@pytest.mark.parametrize(
    ("body", "family"),
    [
        ({"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "quantization": "fp8_tensor"}, "gemm-fp8"),
        ({"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "fp8"}, "gemm-fp8"),
        ({"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "quantization": "fp8_block"}, "gemm-fp8-block"),
        ({"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "quantization": "nvfp4"}, "gemm-fp4"),
        ({"kind": "moe", "tokens": 4096, "hidden": 4096, "inter": 1536, "top_k": 8, "experts": 128}, "moe"),
    ],
)
def test_quantised_products_and_moe_layers_take_their_own_familys_interval(
    client: TestClient, body: dict[str, Any], family: str
) -> None:
    got = op(client, {"hardware": "b200", "op": body})
    low, high = _expected_interval(got, family)
    assert (got["time_s_p10"], got["time_s_p90"]) == (pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))


@pytest.mark.parametrize(
    ("body", "family"),
    [
        ({"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}, "matmul"),  # compute-bound
        ({"kind": "matmul", "m": 16, "n": 8192, "k": 8192, "dtype": "bf16"}, "matmul"),  # a GEMV: memory-bound
        ({"kind": "rmsnorm", "rows": 8192, "cols": 8192}, "rmsnorm"),
        (
            {"kind": "attention", "batch": 8, "heads": 32, "kv_heads": 8, "head_dim": 128, "q_len": 1, "kv_len": 8192},
            "attention-decode",
        ),
        ({"kind": "reduction", "rows": 8192, "cols": 8192}, "*"),  # no rows of its own: its regime's pooled band
    ],
)
def test_an_estimate_carries_the_shipped_interval(client: TestClient, body: dict[str, Any], family: str) -> None:
    got = op(client, {"hardware": A100, "op": body})
    low, high = _expected_interval(got, family)
    assert got["time_s_p10"] == pytest.approx(low, rel=1e-12)
    assert got["time_s_p90"] == pytest.approx(high, rel=1e-12)
    assert got["time_s_p10"] <= got["time_s"] <= got["time_s_p90"]
    assert got["time_s_p90"] > got["time_s_p10"]
    assert "time_s_p10" not in got["details"]
    # The same op in a list, and as a point of a sweep, carries the same interval.
    listed = ops(client, {"hardware": A100, "ops": [body]})["items"][0]
    assert (listed["time_s_p10"], listed["time_s_p90"]) == (got["time_s_p10"], got["time_s_p90"])


def test_flash2_attention_counts_flash_attention_2s_layout_copies_and_names_the_implementations(
    client: TestClient,
) -> None:
    # FlashAttention-2's one-token decode of 32 query heads on 4 K/V heads (H100): the attention kernel reads Q
    # (4·32·128 bf16 = 32 768 B) and K, V (2 · 4 sequences · 4 heads · 1 024 keys · 128 · 2 B = 8 388 608 B) once and
    # writes O (32 768 B); its swapped layout then copies the output and the query back: 2 × 32 768 B read and written.
    op = {"kind": "attention", "batch": 4, "heads": 32, "kv_heads": 4, "head_dim": 128, "q_len": 1, "kv_len": 1024,
          "implementation": "flash2"}  # fmt: skip
    response = client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": op})
    assert response.status_code == 200, response.text
    assert response.json()["bytes"] == 32768 + 8388608 + 32768 + 2 * 2 * 32768
    # The same call as the device's own kernel has no copies.
    own = client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": {**op, "implementation": "flash"}})
    assert own.json()["bytes"] == 32768 + 8388608 + 32768
    bad = client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": {**op, "implementation": "flash3"}})
    assert rejected(bad) == ["body.op.implementation"]
    assert "'flash2'" in bad.json()["message"]
