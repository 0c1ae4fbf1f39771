"""POST/GET /v1/benchmarks and GET /v1/hardware/resolve, on SQLite and PostgreSQL.

Hand-worked figures use the A100 SXM 80GB profile (hardware_db/hardware/a100-sxm-80gb.yaml): 2039e9 B/s HBM at
memory efficiency 0.90, 19.5e12 fp32 vector FLOP/s at 0.80, 5 µs per kernel; kernel-time scopes use the 2.5 µs
floor (adapters/_hardware.py, KERNEL_FLOOR_S).
"""

from __future__ import annotations

import copy
import json
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select

from service import auth, migrate
from service.db import make_engine, make_sessionmaker
from service.examples import BENCHMARK_RUN_EXAMPLES
from service.orm import ApiKey, BenchmarkResult, BenchmarkRun, Calibration
from tests.conftest import LiveServer, PostgresSchema, free_port, ridgeline_command

pytestmark = pytest.mark.databases  # storage: every test here runs on SQLite and PostgreSQL

A100 = "a100-sxm-80gb"
# A vectorized streaming kernel's bandwidth: 2039e9 B/s × 0.90 combined with Little's law over one 16-byte load per
# resident thread in flight (108 SMs × 2048 threads / 650 ns = 5.44 TB/s) as roofline._kernels.MEMORY_QUEUEING_NORM =
# 2 says: 1 / √(1/1835.1e9² + 1/5444.6e9²) = 1739.0e9 B/s.
BW = 1 / ((1 / (2039e9 * 0.90)) ** 2 + (650e-9 / (108 * 2048 * 16)) ** 2) ** 0.5
VECTOR = 19.5e12 * 0.80


def p3(a: float, b: float) -> float:
    """The core's smooth maximum of math and memory time (roofline._estimate.OVERLAP_NORM = 3)."""
    return float((a**3 + b**3) ** (1 / 3))


@pytest.fixture
def keys(client: TestClient) -> Iterator[dict[str, str]]:
    """An upload key, an admin key and a revoked key; every run and key is removed afterwards."""
    factory = client.app.state.sessionmaker  # type: ignore[attr-defined]
    with factory() as session:
        made = {
            scope: auth.create_key(session, f"test-{scope}", auth.Scope(scope)).key for scope in ("upload", "admin")
        }
        revoked = auth.create_key(session, "test-revoked", auth.Scope.upload)
        auth.revoke_key(session, revoked.prefix)
        session.commit()
    yield {**made, "revoked": revoked.key}
    with factory() as session:
        session.execute(delete(BenchmarkResult))
        session.execute(delete(BenchmarkRun))
        session.execute(delete(Calibration))
        session.execute(delete(ApiKey))
        session.commit()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def elementwise(elements: int, **extra: Any) -> dict[str, Any]:
    return {"kind": "elementwise", "elements": elements, "dtype": "bf16", **extra}


def run_body(results: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "hardware": A100,
        "host": "node-1",
        "software": {"cuda": "12.4", "jax": "0.4.35"},
        "timing_scope": "graph_replay",
        "results": results,
        **extra,
    }


def upload(client: TestClient, key: str, body: dict[str, Any], idem: str | None = None) -> Any:
    headers = bearer(key) | ({"Idempotency-Key": idem} if idem else {})
    return client.post("/v1/benchmarks", json=body, headers=headers)


# --- authentication ---------------------------------------------------------------------------------------------


def test_upload_needs_a_live_key(client: TestClient, keys: dict[str, str]) -> None:
    body = run_body([{"op": elementwise(1000), "median_s": 3e-6}])
    missing = client.post("/v1/benchmarks", json=body)
    assert missing.status_code == 401 and missing.json()["error"] == "unauthorized"
    assert "Bearer" in missing.json()["message"]
    assert upload(client, "rl_nope_nope", body).status_code == 401
    revoked = upload(client, keys["revoked"], body)
    assert revoked.status_code == 401 and "revoked" in revoked.json()["message"]
    assert upload(client, keys["upload"], body).status_code == 201
    assert upload(client, keys["admin"], body).status_code == 201  # admin covers upload


def test_reads_are_open_by_default(client: TestClient, keys: dict[str, str]) -> None:
    assert client.get("/v1/benchmarks").status_code == 200


# --- upload -----------------------------------------------------------------------------------------------------


def test_upload_stores_each_result_with_its_prediction(client: TestClient, keys: dict[str, str]) -> None:
    # 1e8-element bf16 copy-like op (1 input, 1 output, 1 FLOP per element): 4e8 bytes.
    # memory 4e8 / 1739.0e9 (BW above) = 230.02 µs; math 1e8 / (19.5e12 · 0.8) = 6.41 µs; + 2.5 µs (graph replay).
    memory_s, compute_s = 4e8 / BW, 1e8 / VECTOR
    predicted = 2.5e-6 + p3(compute_s, memory_s)
    assert predicted == pytest.approx(232.52e-6, rel=1e-4)
    body = run_body(
        [
            {"op": elementwise(100_000_000), "median_s": 250e-6, "p10_s": 248e-6, "p90_s": 260e-6, "repeats": 50},
            {"op": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096}, "median_s": 5.4e-4},
        ]
    )
    response = upload(client, keys["upload"], body)
    assert response.status_code == 201, response.text
    made = response.json()
    assert made["hardware"] == A100 and made["device"] is None
    assert (made["results"], made["predicted"], made["calibrated"]) == (2, 2, 0)

    run = client.get(f"/v1/benchmarks/{made['id']}").json()
    assert run["total"] == 2 and run["software"] == {"cuda": "12.4", "jax": "0.4.35"}
    first = run["items"][0]
    assert first["predicted_s"] == pytest.approx(predicted, rel=1e-9)
    assert first["measured_over_predicted"] == pytest.approx(250e-6 / predicted, rel=1e-9)
    assert first["flops"] == 1e8 and first["bytes"] == 4e8
    assert first["arithmetic_intensity"] == pytest.approx(0.25)
    assert first["achieved_flops_per_s"] == pytest.approx(1e8 / 250e-6)
    assert (first["p10_s"], first["p90_s"], first["repeats"]) == (248e-6, 260e-6, 50)
    assert first["op"]["elements"] == 100_000_000 and first["op"]["kind"] == "elementwise"

    # The same matmul through /v1/estimate/op with the same fixed cost gives the stored prediction.
    estimate = client.post(
        "/v1/estimate/op",
        json={"hardware": A100, "op": body["results"][1]["op"], "options": {"launch_overhead_s": 2.5e-6}},
    ).json()
    second = run["items"][1]
    assert second["predicted_s"] == pytest.approx(estimate["time_s"], rel=1e-12)
    assert second["flops"] == 2 * 4096**3


MIXED_OPS: list[dict[str, Any]] = [
    {"kind": "matmul", "m": 512, "n": 1024, "k": 256},
    {"kind": "matmul", "m": 512, "n": 1024, "k": 256, "epilogue": ["bias"]},
    {"kind": "matmul", "m": 768, "n": 1024, "k": 256, "epilogue": ["bias", "relu"], "fuse_epilogue": False},
    {"kind": "matmul", "m": 1024, "n": 1024, "k": 256, "epilogue": ["bias"]},
    {"kind": "attention", "batch": 2, "heads": 32, "head_dim": 128, "q_len": 1, "kv_len": 4096},
    {"kind": "attention", "batch": 2, "heads": 32, "kv_heads": 8, "head_dim": 128, "q_len": 1, "kv_len": 4096},
    {"kind": "softmax", "rows": 4096, "cols": 1000, "online": False},
    {"kind": "chain", "ops": [{"kind": "elementwise", "elements": 1 << 20}, {"kind": "activation", "elements": 1 << 20,
                                                                              "function": "gelu"}]},
]  # fmt: skip


def test_grouped_predictions_equal_one_by_one_estimates(client: TestClient, keys: dict[str, str]) -> None:
    """Ops that differ in a flag (epilogue, fusion, kv_heads set or not) are never evaluated as one template."""
    made = upload(client, keys["upload"], run_body([{"op": op, "median_s": 1e-4} for op in MIXED_OPS])).json()
    items = client.get(f"/v1/benchmarks/{made['id']}").json()["items"]
    for op, item in zip(MIXED_OPS, items, strict=True):
        one = client.post(
            "/v1/estimate/op", json={"hardware": A100, "op": op, "options": {"launch_overhead_s": 2.5e-6}}
        )
        assert item["predicted_s"] == pytest.approx(one.json()["time_s"], rel=1e-12), op


def test_wall_clock_scope_keeps_the_profile_launch_cost(client: TestClient, keys: dict[str, str]) -> None:
    body = run_body([{"op": elementwise(100_000_000), "median_s": 250e-6}], timing_scope="wall_clock")
    run_id = upload(client, keys["upload"], body).json()["id"]
    item = client.get(f"/v1/benchmarks/{run_id}").json()["items"][0]
    assert item["predicted_s"] == pytest.approx(5e-6 + p3(1e8 / VECTOR, 4e8 / BW), rel=1e-9)


def test_a_stated_host_cost_is_added_once_per_call_to_kernel_time(client: TestClient, keys: dict[str, str]) -> None:
    # A run that states its host's per-call cost (70 µs: what a JAX call and its block_until_ready cost on a GPU
    # host) is predicted at kernel time, the 2.5 µs floor per kernel, plus 70 µs once per call.
    copy_s = p3(1e8 / VECTOR, 4e8 / BW)
    naive = {"kind": "attention", "batch": 1, "heads": 8, "head_dim": 64, "q_len": 256, "kv_len": 256,
             "implementation": "naive"}  # fmt: skip
    results = [{"op": elementwise(100_000_000), "median_s": 400e-6}, {"op": naive, "median_s": 1e-4}]
    body = run_body(results, timing_scope="wall_clock", host_overhead_s=70e-6)
    made = upload(client, keys["upload"], body)
    assert made.status_code == 201, made.text
    run = client.get(f"/v1/benchmarks/{made.json()['id']}").json()
    assert run["host_overhead_s"] == 70e-6
    first, second = run["items"]
    assert first["predicted_s"] == pytest.approx(70e-6 + 2.5e-6 + copy_s, rel=1e-9)
    assert first["measured_over_predicted"] == pytest.approx(400e-6 / (72.5e-6 + copy_s), rel=1e-9)
    # Naive attention is two kernels: each pays the kernel floor, the host cost is paid once.
    kernels = client.post(
        "/v1/estimate/op", json={"hardware": A100, "op": naive, "options": {"launch_overhead_s": 2.5e-6}}
    ).json()
    assert kernels["overhead_s"] == pytest.approx(2 * 2.5e-6, rel=1e-12)
    assert second["predicted_s"] == pytest.approx(kernels["time_s"] + 70e-6, rel=1e-12)
    # Without it, a wall-clock run keeps the profile's 5 µs per kernel (above), and reads back null.
    plain = upload(client, keys["upload"], run_body(results[:1], timing_scope="wall_clock")).json()
    assert client.get(f"/v1/benchmarks/{plain['id']}").json()["host_overhead_s"] is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"timing_scope": "graph_replay", "host_overhead_s": 5e-5}, "wall_clock runs only"),
        ({"timing_scope": "kernel", "host_overhead_s": 0.0}, "wall_clock runs only"),
        ({"timing_scope": "wall_clock", "host_overhead_s": -1e-6}, "greater than or equal to 0"),
        ({"timing_scope": "wall_clock", "host_overhead_s": 2.0}, "less than or equal to 1"),
        ({"timing_scope": "wall_clock", "host_overhead_s": "soon"}, "valid number"),
    ],
)
def test_a_bad_host_cost_is_a_422_naming_it(
    client: TestClient, keys: dict[str, str], extra: dict[str, Any], message: str
) -> None:
    response = upload(client, keys["upload"], run_body([{"op": elementwise(10), "median_s": 1e-4}], **extra))
    assert response.status_code == 422, response.text
    [detail] = [d for d in response.json()["detail"] if d["field"] == "body.host_overhead_s"]
    assert message in detail["message"], detail


@pytest.mark.parametrize("name", sorted(BENCHMARK_RUN_EXAMPLES))
def test_every_swagger_example_uploads(client: TestClient, keys: dict[str, str], name: str) -> None:
    body = BENCHMARK_RUN_EXAMPLES[name]["value"]
    made = upload(client, keys["upload"], body)
    assert made.status_code == 201, made.text
    assert made.json()["results"] == made.json()["predicted"] == len(body["results"])
    run = client.get(f"/v1/benchmarks/{made.json()['id']}").json()
    assert run["host_overhead_s"] == body.get("host_overhead_s")


def test_a_device_description_maps_to_its_profile(client: TestClient, keys: dict[str, str]) -> None:
    body = run_body([{"op": elementwise(1000), "median_s": 3e-6}], hardware="NVIDIA A100-SXM4-80GB")
    made = upload(client, keys["upload"], body).json()
    assert made["hardware"] == A100 and made["device"] == "NVIDIA A100-SXM4-80GB"
    unknown = upload(client, keys["upload"], run_body([{"op": elementwise(1), "median_s": 1e-6}], hardware="TPU7x"))
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["field"] == "body.hardware"


def test_collectives_are_predicted_on_the_profiles_fabric(client: TestClient, keys: dict[str, str]) -> None:
    op = {"kind": "collective", "collective": "all_reduce", "bytes": 1 << 20, "devices": 8, "dtype": "fp16"}
    too_many = op | {"devices": 4096}  # more A100s than one NVSwitch node, and the profile has no scale-out
    made = upload(client, keys["upload"], run_body([{"op": op, "median_s": 3e-5}, {"op": too_many, "median_s": 1e-3}]))
    assert made.status_code == 201, made.text
    assert (made.json()["results"], made.json()["predicted"]) == (2, 1)
    items = client.get(f"/v1/benchmarks/{made.json()['id']}").json()["items"]
    # The same prediction /v1/estimate/collective makes for the profile's own fabric.
    estimate = client.post(
        "/v1/estimate/collective", json={"op": "all_reduce", "bytes": 1 << 20, "hardware": A100, "devices": 8}
    )
    assert estimate.status_code == 200, estimate.text
    assert items[0]["predicted_s"] == pytest.approx(estimate.json()["time_s"], rel=1e-12)
    assert items[0]["op_kind"] == "collective" and items[0]["dtype"] == "fp16" and items[0]["flops"] is None
    assert items[1]["predicted_s"] is None


@pytest.mark.parametrize(
    ("result", "field"),
    [
        ({"op": elementwise(10), "median_s": 0}, "body.results.0.median_s"),
        ({"op": elementwise(10), "median_s": float("nan")}, "body.results.0.median_s"),
        ({"op": elementwise(10), "median_s": 2e-6, "p10_s": 3e-6}, "body.results.0.p10_s"),
        ({"op": elementwise(10), "median_s": 2e-6, "p90_s": 1e-6}, "body.results.0.p90_s"),
        ({"op": elementwise(0), "median_s": 2e-6}, "body.results.0.op.elementwise.elements"),
        ({"op": {"kind": "conv"}, "median_s": 2e-6}, "body.results.0.op"),
        (
            {"op": {"kind": "matmul", "m": 8, "n": 8, "k": 8, "dtype": "fp8"}, "median_s": 2e-6},
            "body.results.0.op.dtype",
        ),
    ],
)
def test_bad_results_are_422_naming_the_field(
    client: TestClient, keys: dict[str, str], result: dict[str, Any], field: str
) -> None:
    response = client.post(
        "/v1/benchmarks",
        content=json.dumps(run_body([result])),
        headers=bearer(keys["upload"]) | {"content-type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert field in [d["field"] for d in response.json()["detail"]]


def test_too_many_results_is_a_422(client: TestClient, keys: dict[str, str]) -> None:
    body = run_body([{"op": elementwise(10), "median_s": 1e-6}] * 10_001)
    response = upload(client, keys["upload"], body)
    assert response.status_code == 422 and response.json()["detail"][0]["field"] == "body.results"


# --- idempotency ------------------------------------------------------------------------------------------------


def test_idempotency_key_replays_the_first_response(client: TestClient, keys: dict[str, str]) -> None:
    body = run_body([{"op": elementwise(1000 + i), "median_s": 3e-6} for i in range(3)])
    first = upload(client, keys["upload"], body, idem="batch-1")
    again = upload(client, keys["upload"], body, idem="batch-1")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    # The same body with its keys in another order and a default spelled out is the same upload.
    reordered = {k: body[k] for k in reversed(list(body))}
    reordered["results"] = copy.deepcopy(body["results"])
    reordered["results"][0]["repeats"] = 1
    assert upload(client, keys["upload"], reordered, idem="batch-1").json() == first.json()
    listed = client.get("/v1/benchmarks").json()
    assert listed["total"] == 1 and listed["items"][0]["results"] == 3

    changed = copy.deepcopy(body)
    changed["results"][0]["median_s"] = 4e-6
    conflict = upload(client, keys["upload"], changed, idem="batch-1")
    assert conflict.status_code == 409 and conflict.json()["error"] == "conflict"
    # Keys belong to the API key that used them: another key may use the same string.
    assert upload(client, keys["admin"], changed, idem="batch-1").status_code == 201
    assert client.get("/v1/benchmarks").json()["total"] == 2


def test_ten_thousand_results_in_one_request(client: TestClient, keys: dict[str, str]) -> None:
    results = [
        {"op": {"kind": "matmul", "m": 1 + i % 100, "n": 4096, "k": 1024 * (1 + i // 100 % 4)}, "median_s": 1e-5}
        for i in range(10_000)
    ]
    made = upload(client, keys["upload"], run_body(results), idem="big").json()
    assert (made["results"], made["predicted"]) == (10_000, 10_000)
    page = client.get(f"/v1/benchmarks/{made['id']}", params={"limit": 5, "offset": 9_995}).json()
    assert page["total"] == 10_000 and len(page["items"]) == 5
    assert page["items"][-1]["op"]["m"] == 100 and page["items"][-1]["op"]["k"] == 4096


# --- listing ----------------------------------------------------------------------------------------------------


def test_list_filters(client: TestClient, keys: dict[str, str]) -> None:
    gemm = {"op": {"kind": "matmul", "m": 64, "n": 64, "k": 64, "dtype": "fp16"}, "median_s": 5e-6}
    a = upload(client, keys["upload"], run_body([gemm])).json()["id"]
    b = upload(
        client,
        keys["upload"],
        run_body([{"op": elementwise(100), "median_s": 3e-6}], hardware="h100-sxm", software={"jax": "0.4.30"}),
    ).json()["id"]

    def ids(**params: Any) -> list[int]:
        response = client.get("/v1/benchmarks", params=params)
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["items"]]

    assert ids() == [b, a]  # newest first
    assert ids(hardware=A100) == [a]
    assert ids(op_kind="matmul") == [a] and ids(op_kind="elementwise") == [b]
    assert ids(dtype="fp16") == [a] and ids(dtype="bf16") == [b]
    assert ids(software="jax=0.4.30") == [b] and ids(software="jax") == [b, a] and ids(software="cuda") == [a]
    assert ids(timing_scope="graph_replay") == [b, a] and ids(timing_scope="kernel") == []
    created = client.get(f"/v1/benchmarks/{a}").json()["created_at"]
    assert ids(since="2000-01-01T00:00:00Z") == [b, a] and ids(until="2000-01-01T00:00:00Z") == []
    assert a in ids(since=created)
    assert client.get("/v1/benchmarks", params={"limit": 1}).json() | {"items": None} == {
        "items": None, "total": 2, "limit": 1, "offset": 0,
    }  # fmt: skip
    listed = client.get("/v1/benchmarks").json()["items"][1]
    assert listed["api_key"] is None and listed["timing_scope"] == "graph_replay"  # no key names to anonymous reads
    assert client.get("/v1/benchmarks", headers=bearer(keys["upload"])).json()["items"][1]["api_key"] == "test-upload"


def test_unknown_run_is_404(client: TestClient, keys: dict[str, str]) -> None:
    response = client.get("/v1/benchmarks/999999")
    assert response.status_code == 404 and response.json()["error"] == "not_found"


# --- device resolution ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "slug"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("TPU v4", "tpu-v4"),
        ("TPU v5 lite", "tpu-v5e"),
        ("TPU v5", "tpu-v5p"),
        ("TPU v6 lite", "tpu-v6e"),
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI355X", "mi355x"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-server"),  # aiconfigurator's device column
        ("cpu", "cpu-generic"),
        ("Intel(R) Xeon(R) CPU @ 2.20GHz", "cpu-generic"),
        ("h200-sxm", "h200-sxm"),
        ("nvidia a100 sxm4 80gb", "a100-sxm-80gb"),
    ],
)
def test_resolve_device(client: TestClient, device: str, slug: str) -> None:
    response = client.get("/v1/hardware/resolve", params={"device": device})
    assert response.status_code == 200, response.text
    assert response.json()["slug"] == slug


def test_resolve_unknown_device_is_404(client: TestClient) -> None:
    response = client.get("/v1/hardware/resolve", params={"device": "TPU7x"})
    assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert client.get("/v1/hardware/resolve").status_code == 422


# --- concurrency ------------------------------------------------------------------------------------------------


@pytest.mark.slow  # live servers
def test_concurrent_uploads_and_retries_store_each_result_once(tmp_path: Path) -> None:
    """20 clients upload at once against `ridgeline serve` on PostgreSQL; 8 of the uploads are sent three times
    each, at the same moment, with the same Idempotency-Key. Every result must be stored exactly once."""
    schema = PostgresSchema()
    try:
        migrate.upgrade(schema.url)
        engine = make_engine(schema.url)
        with make_sessionmaker(engine)() as session:
            key = auth.create_key(session, "concurrency", auth.Scope.upload).key
            session.commit()
        port = free_port()
        env = {**os.environ, "RIDGELINE_DATABASE_URL": schema.url}
        server = LiveServer([*ridgeline_command(), "serve", "--port", str(port)], env, port, tmp_path)
        server.wait_healthy()
        try:
            uploads = [
                (
                    f"upload-{u}",
                    run_body([{"op": elementwise(1000 * (u + 1) + i), "median_s": 1e-5} for i in range(50)]),
                )
                for u in range(20)
            ]
            sends = [(idem, body) for idem, body in uploads] + [(idem, body) for idem, body in uploads[:8]] * 2
            barrier = threading.Barrier(len(sends))

            def send(item: tuple[str, dict[str, Any]]) -> tuple[int, int]:
                idem, body = item
                barrier.wait()
                response = httpx.post(
                    f"{server.url}/v1/benchmarks",
                    json=body,
                    headers=bearer(key) | {"Idempotency-Key": idem},
                    timeout=60,
                )
                return response.status_code, response.json()["id"]

            with ThreadPoolExecutor(max_workers=len(sends)) as pool:
                answers = list(pool.map(send, sends))
        finally:
            server.stop()
        assert {status for status, _ in answers} == {201}
        by_key: dict[str, set[int]] = {}
        for (idem, _), (_, run_id) in zip(sends, answers, strict=True):
            by_key.setdefault(idem, set()).add(run_id)
        assert all(len(ids) == 1 for ids in by_key.values())  # every retry got the first upload's run
        with engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(BenchmarkRun)) == 20
            assert conn.scalar(select(func.count()).select_from(BenchmarkResult)) == 20 * 50
        engine.dispose()
    finally:
        schema.drop()
