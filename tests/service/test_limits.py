"""Bad input, by class of limit (schemas.limits, service.limits): each is a 4xx envelope that names the field and
says what is allowed, never a 500 and never a request that runs away.

Every body here is written by hand; each test states the limit it crosses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas import limits
from service.app import create_app
from service.settings import Settings
from tests.service.test_benchmarks import bearer, keys  # noqa: F401  (the `keys` fixture)

MATMUL = {"kind": "matmul", "m": 1024, "n": 1024, "k": 1024}


def fields(response: Any) -> list[str]:
    return [d["field"] for d in response.json()["detail"]]


def assert_error(response: Any, status: int, code: str, field: str) -> dict[str, Any]:
    """The status, the envelope's code, and `field` among `detail[].field`; returns that detail entry."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == code, body
    matching = [d for d in body["detail"] if d["field"] == field]
    assert matching, f"{field} not in {fields(response)}"
    return matching[0]  # type: ignore[no-any-return]


def post_raw(client: TestClient, path: str, text: str, headers: dict[str, str] | None = None) -> Any:
    """POST a JSON text as it is (json.dumps would refuse NaN with allow_nan=False; httpx writes no NaN)."""
    return client.post(path, content=text.encode(), headers={"Content-Type": "application/json", **(headers or {})})


# --- request body size ------------------------------------------------------------------------------------------


@pytest.fixture
def small_limit_client(database_url: str) -> Iterator[TestClient]:
    """The service with a 1000-byte body limit."""
    app = create_app(Settings(database_url=database_url, max_body_bytes=1000, run_jobs=False))  # as tests/conftest.py
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client
    app.state.engine.dispose()


def test_a_declared_length_over_the_limit_is_413_before_reading(small_limit_client: TestClient) -> None:
    body = json.dumps({"hardware": "h100-sxm", "op": MATMUL, "options": {}}).encode() + b" " * 1000
    response = small_limit_client.post("/v1/estimate/op", content=body, headers={"Content-Type": "application/json"})
    detail = assert_error(response, 413, "payload_too_large", "body")
    assert "at most 1000 bytes" in detail["message"]
    assert f"got {len(body)} bytes" in response.json()["message"]
    assert response.headers["connection"] == "close"


def test_a_chunked_body_that_grows_past_the_limit_is_413(small_limit_client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: httpx sends it chunked
        yield b'{"hardware": "h100-sxm", "op": {"kind": "matmul", "m": 1, "n": 1, "k": 1}, "pad": "'
        for _ in range(20):
            yield b"x" * 100
        yield b'"}'

    response = small_limit_client.post(
        "/v1/estimate/op", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert "content-length" not in response.request.headers
    detail = assert_error(response, 413, "payload_too_large", "body")
    assert "at most 1000 bytes" in detail["message"]


def test_a_body_under_the_limit_passes(small_limit_client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"hardware": "h100-sxm", '
        yield b'"op": {"kind": "matmul", "m": 1024, "n": 1024, "k": 1024}}'

    assert small_limit_client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": MATMUL}).status_code == 200
    chunked = small_limit_client.post("/v1/estimate/op", content=chunks(), headers={"Content-Type": "application/json"})
    assert chunked.status_code == 200, chunked.text


def test_the_limit_is_an_env_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().max_body_bytes == limits.DEFAULT_MAX_BODY_BYTES == 32 * 2**20
    monkeypatch.setenv("RIDGELINE_MAX_BODY_BYTES", "5000000")
    assert Settings().max_body_bytes == 5_000_000


def test_a_10000_result_upload_fits() -> None:
    """The default fits 10 000 results of the largest op the worker's suites plan (a fused chain), as the worker
    sends them (defaults filled in, full-precision floats), with room to spare."""
    from tests.worker.test_suites import TARGETS, all_cases
    from worker.results import validate_op

    largest = max(
        (validate_op(case.op) for target, _ in TARGETS.values() for case in all_cases(target)),
        key=lambda op: len(json.dumps(op)),
    )
    result = {"op": largest, "median_s": 1 / 3 * 1e-3, "p10_s": 1 / 7 * 1e-3, "p90_s": 2 / 3 * 1e-3, "repeats": 1000}
    body = {"hardware": "NVIDIA H100 80GB HBM3", "host": "gpu-node-17", "timing_scope": "kernel"}
    size = len(json.dumps({**body, "results": [result] * limits.MAX_RESULTS}).encode())
    assert 5e6 < size < limits.DEFAULT_MAX_BODY_BYTES / 2, size  # 13.4 MB measured


# --- sweep and list sizes ---------------------------------------------------------------------------------------


def test_op_sweep_grid_over_100000_points(client: TestClient) -> None:
    vary = {"m": list(range(1, 401)), "n": list(range(1, 251)), "k": [64, 128]}  # 400 × 250 × 2 = 200 000
    response = client.post("/v1/estimate/ops", json={"hardware": "h100-sxm", "sweep": {"op": MATMUL, "vary": vary}})
    detail = assert_error(response, 422, "validation_error", "body.sweep.vary")
    assert detail["message"] == "the grid has 200000 points; at most 100000 are allowed"


def test_op_sweep_of_more_than_6_fields(client: TestClient) -> None:
    vary = {name: [1, 2] for name in ("m", "n", "k", "batch", "tile", "epilogue", "dtype")}
    response = client.post("/v1/estimate/ops", json={"hardware": "h100-sxm", "sweep": {"op": MATMUL, "vary": vary}})
    detail = assert_error(response, 422, "validation_error", "body.sweep.vary")
    assert "at most 6 items" in detail["message"]


def test_op_list_over_10000(client: TestClient) -> None:
    response = client.post("/v1/estimate/ops", json={"hardware": "h100-sxm", "ops": [MATMUL] * 10_001})
    detail = assert_error(response, 422, "validation_error", "body.ops")
    assert "at most 10000 items" in detail["message"]


INFERENCE = {
    "hardware": "h100-sxm",
    "model": "llama-3-8b",
    "workload": {"batch": 8, "prompt_tokens": 512, "output_tokens": 128},
}


def test_inference_batch_over_1000_items(client: TestClient) -> None:
    response = client.post("/v1/estimate/inference/batch", json={"items": [INFERENCE] * 1001})
    detail = assert_error(response, 422, "validation_error", "body.items")
    assert "at most 1000 items" in detail["message"]


def test_inference_sweep_over_1000_points(client: TestClient) -> None:
    vary = {"workload.batch": list(range(1, 101)), "workload.prompt_tokens": list(range(1, 12))}  # 1100 points
    response = client.post("/v1/estimate/inference/batch", json={"sweep": {"base": INFERENCE, "vary": vary}})
    detail = assert_error(response, 422, "validation_error", "body.sweep.vary")
    assert detail["message"] == "the grid has 1100 points; at most 1000 are allowed"


PLAN = {
    "model": "llama-3-8b",
    "hardware": ["h100-sxm"],
    "traffic": {"requests_per_s": 10, "prompt_tokens": 512, "output_tokens": 128},
}


def test_plan_search_over_1500_candidates(client: TestClient) -> None:
    # 2 × 16 × 20 × 3 = 1 920 candidates: past what a request answers (1 500), so a job (202 and its Location).
    search = {"tensor": list(range(1, 17)), "max_num_seqs": list(range(1, 21)), "max_num_batched_tokens": [64, 65, 66]}
    response = client.post("/v1/plan", json={**PLAN, "hardware": ["h100-sxm", "a100-sxm-80gb"], "search": search})
    assert response.status_code == 202 and response.headers["Location"].startswith("/v1/jobs/")
    # 2 × 16 × 20 × 32 = 20 480: past a job's 20 000 too.
    search["max_num_batched_tokens"] = list(range(64, 96))
    response = client.post("/v1/plan", json={**PLAN, "hardware": ["h100-sxm", "a100-sxm-80gb"], "search": search})
    detail = assert_error(response, 422, "validation_error", "body.search")
    assert detail["message"].startswith("the search has 20480 candidates")
    assert "at most 20000 are allowed" in detail["message"]


def test_plan_search_axis_over_64_values(client: TestClient) -> None:
    response = client.post("/v1/plan", json={**PLAN, "search": {"max_num_seqs": list(range(1, 66))}})
    detail = assert_error(response, 422, "validation_error", "body.search.max_num_seqs")
    assert "at most 64 items" in detail["message"]


def test_upload_over_10000_results(client: TestClient, keys: dict[str, str]) -> None:  # noqa: F811
    result = {"op": MATMUL, "median_s": 1e-4}
    body = {"hardware": "h100-sxm", "host": "h", "timing_scope": "kernel", "results": [result] * 10_001}
    response = client.post("/v1/benchmarks", json=body, headers=bearer(keys["upload"]))
    detail = assert_error(response, 422, "validation_error", "body.results")
    assert "at most 10000 items" in detail["message"]


# --- magnitudes: nothing hangs, overflows or allocates without bound ---------------------------------------------


@pytest.mark.parametrize(
    ("op", "field", "limit"),
    [
        ({**MATMUL, "m": 2**24 + 1}, "body.op.m", 2**24),
        ({**MATMUL, "batch": 10**12}, "body.op.batch", 2**24),
        ({"kind": "elementwise", "elements": 2**40 + 1}, "body.op.elements", 2**40),
        ({"kind": "softmax", "rows": 10**13, "cols": 4}, "body.op.rows", 2**40),
        ({"kind": "elementwise", "elements": 4, "flops_per_element": 1e6}, "body.op.flops_per_element", 10_000),
        (
            {"kind": "chain", "ops": [{"kind": "rotary", "tokens": 1, "heads": 2**30, "head_dim": 1}]},
            "body.op.ops.0.heads",
            2**24,
        ),
    ],
)
def test_op_dimensions(client: TestClient, op: dict[str, Any], field: str, limit: int) -> None:
    response = client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": op})
    detail = assert_error(response, 422, "validation_error", field)
    assert detail["message"] == f"Input should be less than or equal to {limit}"


def test_a_decode_of_10_to_the_12_tokens(client: TestClient) -> None:
    workload = {"batch": 1, "prompt_tokens": 128, "output_tokens": 10**12}
    response = client.post("/v1/estimate/inference", json={**INFERENCE, "workload": workload})
    detail = assert_error(response, 422, "validation_error", "body.workload.output_tokens")
    assert detail["message"] == "Input should be less than or equal to 2097152"


def test_an_inline_model_of_2_to_the_40_layers(client: TestClient) -> None:
    """The inference model allocates per layer: 2⁴⁰ layers was a MemoryError (a 500) before the bound."""
    model = client.get("/v1/models/llama-3-8b").json()
    config = {k: v for k, v in model.items() if k not in ("builtin", "version", "created_at", "updated_at")}
    response = client.post("/v1/estimate/inference", json={**INFERENCE, "model": {**config, "layers": 2**40}})
    detail = assert_error(response, 422, "validation_error", "body.model.layers")
    assert detail["message"] == "Input should be less than or equal to 65536"


def test_a_torus_of_10_to_the_9_devices(client: TestClient) -> None:
    topology = {"kind": "torus", "axes": [{"size": 1000}] * 3, "link_bandwidth_bytes_per_s": 1e11}
    response = client.post("/v1/estimate/collective", json={"op": "all_reduce", "bytes": 1e9, "topology": topology})
    detail = assert_error(response, 422, "validation_error", "body.topology.axes")
    assert detail["message"] == "the axes make a torus of 1000000000 devices; at most 1048576 are allowed"


def test_a_hierarchy_of_10_to_the_12_devices(client: TestClient) -> None:
    level = {"kind": "switch", "devices": 10**6, "link_bandwidth_bytes_per_s": 1e11}
    topology = {"kind": "hierarchical", "inner": level, "outer": level}
    response = client.post("/v1/estimate/collective", json={"op": "all_reduce", "bytes": 1e9, "topology": topology})
    detail = assert_error(response, 422, "validation_error", "body.topology.outer")
    assert "1000000000000 devices; at most 1048576 are allowed" in detail["message"]


def test_collective_participants_and_message(client: TestClient) -> None:
    response = client.post(
        "/v1/estimate/collective", json={"op": "all_reduce", "bytes": 1e300, "hardware": "h100-sxm", "devices": 10**9}
    )
    assert set(fields(response)) >= {"body.bytes", "body.devices"}
    assert_error(response, 422, "validation_error", "body.bytes")


def test_plan_max_devices_and_batch(client: TestClient) -> None:
    response = client.post("/v1/plan", json={**PLAN, "search": {"max_num_seqs": [2**21], "max_devices": 10**9}})
    assert response.status_code == 422
    assert set(fields(response)) == {"body.search.max_num_seqs.0", "body.search.max_devices"}


# --- fleets -------------------------------------------------------------------------------------------------------

FLEET = 1 << 20  # devices of one job (schemas.limits.MAX_DEVICES)
TRAINING = {"model": "llama-3-8b", "hardware": "h100-sxm", "sequence": 8192, "micro_batch": 1, "global_batch": FLEET}
TRAINING_PLAN = {**{k: v for k, v in TRAINING.items() if k != "micro_batch"}, "train_tokens": 1e12}
LENGTHS = {"prompt_tokens": {"kind": "fixed", "value": 512}, "output_tokens": {"kind": "fixed", "value": 64}}
SERVING = {"model": "llama-3-8b", "hardware": "h100-sxm", "load": {"concurrency": 8, "requests": 64, **LENGTHS}}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/estimate/training", {**TRAINING, "devices": FLEET + 1}, "body.devices"),
        ("/v1/estimate/training", {**TRAINING, "parallelism": {"data": FLEET + 1}}, "body.parallelism.data"),
        ("/v1/estimate/training", {**TRAINING, "sharding": {"fsdp": "hybrid", "shard_group": FLEET + 1}},
         "body.sharding.shard_group"),
        ("/v1/plan/training", {**TRAINING_PLAN, "devices": FLEET + 1}, "body.devices"),
        ("/v1/plan/training", {**TRAINING_PLAN, "devices": {"min": 8, "max": FLEET + 1, "step": 1 << 15}},
         "body.devices.max"),
        ("/v1/estimate/serving", {**SERVING, "replicas": FLEET + 1}, "body.replicas"),
        ("/v1/estimate/serving", {**SERVING, "mode": "disaggregated", "prefill": {"workers": FLEET + 1},
                                  "decode": {}}, "body.prefill.workers"),
        ("/v1/estimate/inference", {**INFERENCE, "devices": FLEET + 1}, "body.devices"),
        ("/v1/estimate/collective", {"op": "all_reduce", "bytes": 1e9, "hardware": "h100-sxm", "devices": FLEET + 1},
         "body.devices"),
        ("/v1/plan", {**PLAN, "search": {"max_devices": FLEET + 1}}, "body.search.max_devices"),
    ],
)  # fmt: skip
def test_a_job_or_a_fleet_holds_at_most_2_to_the_20_devices(
    client: TestClient, path: str, body: dict[str, Any], field: str
) -> None:
    detail = assert_error(client.post(path, json=body), 422, "validation_error", field)
    assert detail["message"] == "Input should be less than or equal to 1048576"


@pytest.mark.parametrize(
    ("change", "field"),
    [({"tensor": 4097}, "body.parallelism.tensor"), ({"pipeline": 4097}, "body.parallelism.pipeline"),
     ({"context": 4097}, "body.parallelism.context"), ({"expert": 4097}, "body.parallelism.expert")],
)  # fmt: skip
def test_a_parallelism_degree_inside_a_replica_stays_at_4096(
    client: TestClient, change: dict[str, int], field: str
) -> None:
    response = client.post("/v1/estimate/training", json={**TRAINING, "parallelism": change})
    detail = assert_error(response, 422, "validation_error", field)
    assert detail["message"] == "Input should be less than or equal to 4096"


def test_a_plan_whose_traffic_needs_more_than_2_to_the_20_devices(client: TestClient) -> None:
    """10²² requests/s: ~10¹⁹ units of one H100, past 2⁶⁴ as an integer (a 500 from the encoder before the bound)."""
    traffic = {**PLAN["traffic"], "requests_per_s": 1e22}
    search = {"tensor": [1], "max_num_seqs": [8]}
    response = client.post("/v1/plan", json={**PLAN, "traffic": traffic, "search": search})
    detail = assert_error(response, 422, "validation_error", "body.traffic")
    assert "more than 1048576 devices" in detail["message"]


def test_a_denormal_efficiency_would_make_every_time_infinite(client: TestClient) -> None:
    """5e-324 > 0, but peak × 5e-324 underflows and every time became infinity (JSON null) before the bound."""
    options = {"matmul_efficiency": 5e-324}
    response = client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": MATMUL, "options": options})
    detail = assert_error(response, 422, "validation_error", "body.options.matmul_efficiency")
    assert detail["message"] == "Input should be greater than or equal to 0.000001"


def test_a_figure_outside_the_physical_range(client: TestClient) -> None:
    patch = {"memory": {"device": {"bandwidth_bytes_per_s": 1e-300}}}
    response = client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "hardware_patch": patch, "op": MATMUL})
    detail = assert_error(response, 422, "validation_error", "body.hardware_patch.memory.device.bandwidth_bytes_per_s")
    assert detail["message"] == "Input should be greater than or equal to 0.000000000000001"


# --- non-finite numbers (Python's JSON parser accepts NaN, Infinity and -Infinity) -------------------------------


def _profile(client: TestClient) -> dict[str, Any]:
    profile = client.get("/v1/hardware/h100-sxm").json()
    return {k: v for k, v in profile.items() if k not in ("builtin", "version", "created_at", "updated_at")}


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_in_estimates(client: TestClient, token: str) -> None:
    cases = [
        ("/v1/estimate/op", {"hardware": "h100-sxm", "op": {"kind": "elementwise", "elements": 8,
                                                             "flops_per_element": "@"}}, "body.op.flops_per_element"),
        ("/v1/estimate/op", {"hardware": "h100-sxm", "op": MATMUL, "options": {"memory_efficiency": "@"}},
         "body.options.memory_efficiency"),
        ("/v1/estimate/op", {"hardware": "h100-sxm", "op": MATMUL, "options": {"launch_overhead_s": "@"}},
         "body.options.launch_overhead_s"),
        ("/v1/estimate/op", {"hardware": "h100-sxm", "op": MATMUL,
                             "hardware_patch": {"overheads": {"kernel_launch_s": "@"}}},
         "body.hardware_patch.overheads.kernel_launch_s"),
        ("/v1/estimate/ops", {"hardware": "h100-sxm", "sweep": {"op": MATMUL, "vary": {"m": [64, "@"]}}},
         "body.sweep.vary.m.1"),
        ("/v1/estimate/collective", {"op": "all_gather", "bytes": "@", "hardware": "h100-sxm", "devices": 8},
         "body.bytes"),
        ("/v1/estimate/collective", {"op": "all_gather", "bytes": 1e6, "topology": {
            "kind": "ring", "devices": 8, "link_bandwidth_bytes_per_s": "@"}},
         "body.topology.link_bandwidth_bytes_per_s"),
        ("/v1/estimate/inference", {**INFERENCE, "price_per_device_hour": "@"}, "body.price_per_device_hour"),
        ("/v1/plan", {**PLAN, "traffic": {**PLAN["traffic"], "requests_per_s": "@"}},  # type: ignore[dict-item]
         "body.traffic.requests_per_s"),
        ("/v1/plan", {**PLAN, "prices": {"h100-sxm": "@"}}, "body.prices.h100-sxm"),
        ("/v1/plan", {**PLAN, "objectives": {"ttft_s": "@"}}, "body.objectives.ttft_s"),
    ]  # fmt: skip
    for path, body, field in cases:
        text = json.dumps(body).replace('"@"', token)
        assert_error(post_raw(client, path, text), 422, "validation_error", field)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_in_profiles_and_models(client: TestClient, writer: dict[str, str], token: str) -> None:
    profile = {**_profile(client), "slug": "nan-test"}
    profile["memory"]["device"]["bandwidth_bytes_per_s"] = "@"
    text = json.dumps(profile).replace('"@"', token)
    assert_error(
        post_raw(client, "/v1/hardware", text, writer),
        422,
        "validation_error",
        "body.memory.device.bandwidth_bytes_per_s",
    )

    inline = {"hardware": profile, "op": MATMUL}
    text = json.dumps(inline).replace('"@"', token)
    field = "body.hardware.memory.device.bandwidth_bytes_per_s"
    assert_error(post_raw(client, "/v1/estimate/op", text), 422, "validation_error", field)

    model = client.get("/v1/models/llama-3-8b").json()
    config = {k: v for k, v in model.items() if k not in ("builtin", "version", "created_at", "updated_at")}
    text = json.dumps({**INFERENCE, "model": {**config, "reported_parameters": "@"}}).replace('"@"', token)
    assert_error(post_raw(client, "/v1/estimate/inference", text), 422, "validation_error",
                 "body.model.reported_parameters")  # fmt: skip

    made = client.post("/v1/models", json={**config, "slug": "nan-test-model"}, headers=writer)
    assert made.status_code == 201, made.text
    text = json.dumps({"reported_parameters": "@"}).replace('"@"', token)
    headers = {**writer, "Content-Type": "application/json"}
    response = client.patch("/v1/models/nan-test-model", content=text, headers=headers)
    assert_error(response, 422, "validation_error", "body.reported_parameters")


@pytest.mark.parametrize("token", ["NaN", "Infinity"])
def test_non_finite_numbers_in_uploads_and_calibrations(
    client: TestClient,
    keys: dict[str, str],  # noqa: F811
    token: str,
) -> None:
    result = {"op": MATMUL, "median_s": "@"}
    body = {"hardware": "h100-sxm", "host": "h", "timing_scope": "kernel", "results": [result]}
    text = json.dumps(body).replace('"@"', token)
    response = post_raw(client, "/v1/benchmarks", text, bearer(keys["upload"]))
    assert_error(response, 422, "validation_error", "body.results.0.median_s")

    text = json.dumps({"hardware": "h100-sxm", "holdout_fraction": "@"}).replace('"@"', token)
    response = post_raw(client, "/v1/calibrations", text, bearer(keys["admin"]))
    assert_error(response, 422, "validation_error", "body.holdout_fraction")


# --- over-long strings ---------------------------------------------------------------------------------------------


def test_over_long_strings(client: TestClient, keys: dict[str, str]) -> None:  # noqa: F811
    long = "a" * 1000
    response = client.post("/v1/estimate/op", json={"hardware": long, "op": MATMUL})
    detail = assert_error(response, 422, "validation_error", "body.hardware")
    assert detail["message"] == "String should have at most 64 characters"

    response = client.post("/v1/estimate/inference", json={**INFERENCE, "model": long})
    assert_error(response, 422, "validation_error", "body.model")

    response = client.post("/v1/plan", json={**PLAN, "prices": {long: 2.0}})
    assert_error(response, 422, "validation_error", f"body.prices.{long}.[key]")

    profile = {**_profile(client), "slug": "long-test", "name": long, "notes": ["n" * 2001]}
    profile["figure_sources"] = {**profile["figure_sources"], "x" * 201: "a"}
    response = client.post("/v1/hardware", json=profile, headers=bearer(keys["admin"]))
    assert {"body.name", "body.notes.0"} <= set(fields(response))
    assert response.status_code == 422 and any(f.endswith("[key]") for f in fields(response))

    run = {"hardware": "h100-sxm", "host": long, "timing_scope": "kernel", "software": {"cuda": "9" * 101},
           "results": [{"op": MATMUL, "median_s": 1e-4}]}  # fmt: skip
    response = client.post("/v1/benchmarks", json=run, headers=bearer(keys["upload"]))
    assert {"body.host", "body.software.cuda"} <= set(fields(response))

    response = client.post(
        "/v1/benchmarks",
        json={**run, "host": "h", "software": {}},
        headers={**bearer(keys["upload"]), "Idempotency-Key": "k" * 201},
    )
    detail = assert_error(response, 422, "validation_error", "header.Idempotency-Key")
    assert detail["message"] == "String should have at most 200 characters"

    response = client.get("/v1/models", params={"family": long})
    assert_error(response, 422, "validation_error", "query.family")
    response = client.get("/v1/hardware/resolve", params={"device": long})
    assert_error(response, 422, "validation_error", "query.device")
    response = client.get(f"/v1/hardware/{long}")
    assert_error(response, 422, "validation_error", "path.slug")


# --- unknown enum values ---------------------------------------------------------------------------------------------


def test_unknown_enum_values_list_the_allowed_ones(client: TestClient) -> None:
    response = client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": {**MATMUL, "dtype": "fp128"}})
    detail = assert_error(response, 422, "validation_error", "body.op.dtype")
    assert detail["message"] == (
        "Input should be 'fp64', 'fp32', 'tf32', 'bf16', 'fp16', 'fp8', 'fp6', 'int8', 'int4' or 'fp4'"
    )

    response = client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": {**MATMUL, "kind": "conv"}})
    detail = assert_error(response, 422, "validation_error", "body.op.kind")
    assert "'matmul'" in detail["message"] and "'chain'" in detail["message"]

    response = client.post("/v1/estimate/collective", json={"op": "all_sum", "bytes": 1e6, "hardware": "h100-sxm",
                                                             "devices": 8})  # fmt: skip
    detail = assert_error(response, 422, "validation_error", "body.op")
    assert "'all_reduce'" in detail["message"] and "'send_recv'" in detail["message"]

    response = client.get("/v1/hardware", params={"vendor": "acme"})
    detail = assert_error(response, 422, "validation_error", "query.vendor")
    assert detail["message"] == "Input should be 'nvidia', 'amd', 'google', 'intel' or 'generic'"

    response = client.post("/v1/estimate/inference", json={**INFERENCE, "dtypes": {"weights": "fp64"}})
    detail = assert_error(response, 422, "validation_error", "body.dtypes.weights")
    assert detail["message"] == "Input should be 'fp32', 'bf16', 'fp16', 'fp8', 'int8', 'int4' or 'fp4'"


def test_a_malformed_json_body_names_where_it_breaks(client: TestClient) -> None:
    """orjson parses bodies (service.encoding.OrjsonRequest); one it refuses is parsed again by the json module, so a
    malformed body gets the json module's error: where the text stops making sense, here its end."""
    text = '{"hardware": "a100-sxm-80gb", "op": {'
    response = client.post("/v1/estimate/op", content=text, headers={"content-type": "application/json"})
    detail = assert_error(response, 422, "validation_error", f"body.{len(text)}")
    assert (detail["type"], detail["message"]) == ("json_invalid", "JSON decode error")


def test_an_integer_beyond_64_bits_names_its_field(client: TestClient) -> None:
    """orjson refuses such a literal; the json module's fallback reads it and the schema names the field."""
    response = client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": {**MATMUL, "m": 10**30}})
    detail = assert_error(response, 422, "validation_error", "body.op.m")
    assert detail["message"] == "Unable to parse input string as an integer, exceeded maximum size"
