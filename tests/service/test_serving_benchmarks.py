"""POST/GET /v1/serving-benchmarks and their kind in /v1/accuracy, on SQLite and PostgreSQL."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select

from service.orm import ServingBenchmark
from tests.adapters.loadtests import files
from tests.conftest import bearer, make_key

pytestmark = pytest.mark.databases  # storage and idempotency: every test here runs on SQLite and PostgreSQL

DEPLOYMENT = {"model": "llama-3-8b", "hardware": "h100-sxm", "release": {"name": "vllm", "version": "0.11.0"}}


def _body(**over: Any) -> dict[str, Any]:
    return {"format": "vllm", "result": files.vllm(), "deployment": copy.deepcopy(DEPLOYMENT)} | over


def _rows(client: TestClient) -> int:
    with client.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        return int(session.scalar(select(func.count()).select_from(ServingBenchmark)) or 0)


@pytest.fixture
def uploader(client: TestClient) -> dict[str, str]:
    yield bearer(make_key(client, "upload"))
    with client.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        session.execute(delete(ServingBenchmark))
        session.commit()


def test_upload_stores_the_measured_and_predicted_load_test(client: TestClient, uploader: dict[str, str]) -> None:
    r = client.post("/v1/serving-benchmarks", json=_body(), headers=uploader | {"Idempotency-Key": "one"})
    assert r.status_code == 201, r.text
    doc = r.json()
    # The vLLM file: 51 200 / 100 = 512 prompt and 12 800 / 100 = 128 output tokens, max_concurrency 8.
    assert doc["load"] == {"concurrency": 8, "requests": 100, "prompt_tokens": {"kind": "fixed", "value": 512},
                           "output_tokens": {"kind": "fixed", "value": 128}}  # fmt: skip
    assert doc["measured"]["ttft_s"] == {"mean": 0.04, "p50": 0.038, "p90": 0.06, "p99": 0.09}
    assert (doc["engine"], doc["engine_version"], doc["hardware"]) == ("vllm", "0.11.0", "h100-sxm")
    # The prediction is the serving estimate of the same deployment and load.
    est = client.post("/v1/estimate/serving", json={"model": "llama-3-8b", "hardware": "h100-sxm", "load": doc["load"]})
    assert est.status_code == 200
    want = est.json()
    assert doc["predicted"]["ttft_s"]["mean"] == want["ttft_s"]["mean"]
    assert doc["predicted"]["output_tokens_per_s"] == want["output_tokens_per_s"]
    assert doc["error"]["ttft_s"] == pytest.approx(want["ttft_s"]["mean"] / 0.040 - 1)
    assert doc["error"]["output_tokens_per_s"] == pytest.approx(want["output_tokens_per_s"] / 640.0 - 1)

    page = client.get("/v1/serving-benchmarks", params={"hardware": "h100-sxm"}).json()
    assert page["total"] == 1 and page["items"][0]["id"] == doc["id"]
    assert client.get("/v1/serving-benchmarks", params={"engine": "sglang"}).json()["total"] == 0
    assert client.get(f"/v1/serving-benchmarks/{doc['id']}").json()["error"] == doc["error"]
    group = client.get("/v1/accuracy").json()["serving"]
    assert [(g["hardware"], g["engine"], g["model"], g["load_tests"]) for g in group] == [
        ("h100-sxm", "vllm", "llama-3-8b", 1)
    ]
    assert group[0]["ttft"]["median_ape"] == pytest.approx(abs(doc["error"]["ttft_s"]))


def test_a_repeated_upload_stores_nothing_twice(client: TestClient, uploader: dict[str, str]) -> None:
    headers = uploader | {"Idempotency-Key": "again"}
    first = client.post("/v1/serving-benchmarks", json=_body(), headers=headers)
    again = client.post("/v1/serving-benchmarks", json=_body(), headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    other = client.post("/v1/serving-benchmarks", json=_body(host="elsewhere"), headers=headers)
    assert other.status_code == 409
    assert _rows(client) == 1


def test_an_upload_needs_an_upload_key(client: TestClient) -> None:
    assert client.post("/v1/serving-benchmarks", json=_body()).status_code == 401


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"format": "locust"}, "body.format",
         "'aiperf', 'guidellm', 'vllm', 'sglang', 'inference_perf' or 'trtllm_bench'"),
        # llama-3-70b's 70.6e9 bf16 weights (141 GB) on one 80 GB H100 leave no KV pool
        ({"deployment": DEPLOYMENT | {"model": "llama-3-70b"}}, "body.deployment.engine.memory_fraction", "KV pool"),
        ({"deployment": DEPLOYMENT | {"hardware": "no-such-gpu"}}, "body.deployment.hardware", "no-such-gpu"),
        ({"deployment": DEPLOYMENT | {"mode": "disaggregated"}}, "body.deployment.prefill", "required"),
        ({"result": files.vllm() | {"median_e2el_ms": 1500.0}}, "body.result.median_e2el_ms", "above p90"),
        ({"result": files.vllm() | {"request_throughput": 9.0}}, "body.result.request_throughput", "5/s"),
        ({"result": files.vllm() | {"max_concurrency": None, "request_rate": "inf"}, "load": {"concurrency": 8}},
         "body.load", "prompt_tokens"),
    ],
)  # fmt: skip
def test_bad_uploads_name_the_field(
    client: TestClient, uploader: dict[str, str], over: dict[str, Any], field: str, words: str
) -> None:
    r = client.post("/v1/serving-benchmarks", json=_body(**over), headers=uploader | {"Idempotency-Key": "bad"})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["field"] == field and words in detail["message"]
    assert _rows(client) == 0
