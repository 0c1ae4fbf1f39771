"""POST /v1/plan/training over HTTP, on SQLite and PostgreSQL: the examples answer, the best configuration is never
slower than any valid configuration (each posted to /v1/estimate/training), nothing that cannot fit is returned,
and a search nothing can build is a 422 naming the field."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.training_plan import TrainingPlanRead
from service.examples import TRAINING_PLAN_EXAMPLES

PATH = "/v1/plan/training"
SMALL: dict[str, Any] = {
    "model": "llama-3-8b", "hardware": "h100-sxm", "devices": 8, "sequence": 4096, "global_batch": 32,
    "train_tokens": 1e11, "price_per_device_hour": 2.0, "max_results": 50,
    "search": {"tensor": [1, 2], "sequence_parallel": [True], "pipeline": [1, 2], "schedule": ["1f1b"],
               "sharding": [{"zero": 0}, {"zero": 1}, {"fsdp": "full"}], "micro_batch": [1, 2],
               "recompute": ["none", "selective"]},
}  # fmt: skip


def plan(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(PATH, json=body)
    assert response.status_code == 200, response.text
    doc: dict[str, Any] = response.json()
    TrainingPlanRead.model_validate(doc)
    return doc


def rejected(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) == {"error", "message", "detail"}
    return [d["field"] for d in body["detail"]]


@pytest.mark.parametrize("name", list(TRAINING_PLAN_EXAMPLES))
def test_every_example_answers_ranked_configurations(client: TestClient, name: str) -> None:
    body = TRAINING_PLAN_EXAMPLES[name]["value"]
    doc = plan(client, body)
    configs = doc["configurations"]
    assert 0 < len(configs) <= body["max_results"]
    assert doc["searched"] == doc["invalid"] + doc["pruned_for_memory"] + doc["evaluated"]
    key = "step_s" if doc["ranked_by"] == "time" else "device_hours"
    values = [c["step_s"] if key == "step_s" else c["training"]["device_hours"] for c in configs]
    assert values == sorted(values)
    for c in configs:
        assert c["memory_per_device_bytes"] <= c["capacity_bytes"]
        assert c["estimate"]["memory"]["fits"]
        assert c["training"]["time_s"] == pytest.approx(body["train_tokens"] / c["tokens_per_s"])


def _estimate_body(c: dict[str, Any]) -> dict[str, Any]:
    lay = c["layout"]
    return {
        "model": SMALL["model"], "hardware": SMALL["hardware"], "devices": lay["devices"],
        "parallelism": {"tensor": lay["tensor"], "sequence_parallel": lay["sequence_parallel"],
                        "pipeline": lay["pipeline"], "data": lay["data"]},
        "sharding": {k: v for k, v in lay["sharding"].items() if v is not None}, "sequence": SMALL["sequence"],
        "micro_batch": lay["micro_batch"], "global_batch": SMALL["global_batch"], "recompute": lay["recompute"],
        "train_tokens": SMALL["train_tokens"], "price_per_device_hour": SMALL["price_per_device_hour"],
    }  # fmt: skip


def test_the_best_is_never_slower_than_any_valid_configuration(client: TestClient) -> None:
    doc = plan(client, SMALL)
    best = doc["configurations"][0]
    # Each configuration answered is the step POST /v1/estimate/training answers for its layout.
    for c in doc["configurations"]:
        single = client.post("/v1/estimate/training", json=_estimate_body(c)).json()
        assert single == c["estimate"]
    # Every combination of the search, posted one by one: none that fits is faster than the plan's best.
    s = SMALL["search"]
    fastest = None
    for t, p, sharding, mb, recompute in itertools.product(
        s["tensor"], s["pipeline"], s["sharding"], s["micro_batch"], s["recompute"]
    ):
        body = {**SMALL, "devices": 8, "parallelism": {"tensor": t, "sequence_parallel": t > 1, "pipeline": p},
                "sharding": sharding, "micro_batch": mb, "recompute": recompute}  # fmt: skip
        for k in ("search", "max_results"):
            body.pop(k)
        response = client.post("/v1/estimate/training", json=body)
        if response.status_code == 422:
            continue
        est = response.json()
        if est["memory"]["fits"]:
            assert best["step_s"] <= est["step_s"]
            fastest = est["step_s"] if fastest is None else min(fastest, est["step_s"])
    assert best["step_s"] == fastest


def test_a_configuration_that_cannot_fit_is_never_returned(client: TestClient) -> None:
    # Llama 3 70B on 8 H100s: 70.6e9 parameters (the catalogue's, as Meta's model card: 70 B) × 16 bytes of
    # weights, gradients and Adam states (ZeRO §3) / at most 8 ways (tensor × pipeline × the ZeRO group = 8) is
    # ≥ 141 GB a device, past 80 GB: nothing fits, nothing is returned, and the least memory searched says so.
    body = {**SMALL, "model": "llama-3-70b", "search": {**SMALL["search"], "tensor": [2, 4, 8]}}
    doc = plan(client, body)
    assert doc["configurations"] == [] and doc["evaluated"] == 0
    assert doc["pruned_for_memory"] == doc["searched"] - doc["invalid"] > 0
    assert doc["smallest_pruned_memory_bytes"] >= 16 * 70e9 / 8 > 80e9


def test_a_device_count_nothing_divides_is_a_422_naming_devices(client: TestClient) -> None:
    # 7 devices: tensor 2 and pipeline 2 do not divide them, and tensor = pipeline = 1 (data 7) does not divide the
    # global batch of 32.
    response = client.post(PATH, json={**SMALL, "devices": 7})
    assert rejected(response) == ["body.devices"]
    assert "not whole replicas" in response.json()["message"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"devices": {"min": 8, "max": 4096, "step": 1}}, "body.devices"),
        ({"devices": {"min": 16, "max": 8}}, "body.devices"),
        ({"search": {"micro_batch": list(range(1, 65)), "tensor": [1, 2, 4, 8], "pipeline": [1, 2, 4, 8]}},
         "body.search"),
        ({"search": {"tensor": [2, 2]}}, "body.search.tensor"),
        ({"max_results": 51}, "body.max_results"),
        ({"rank_by": "cost"}, "body.rank_by"),
        ({"train_tokens": None}, "body.train_tokens"),
    ],
)  # fmt: skip
def test_bad_input_names_the_field(client: TestClient, change: dict[str, Any], field: str) -> None:
    assert field in rejected(client.post(PATH, json={**SMALL, **change}))


def test_a_plan_for_131072_h100s(client: TestClient) -> None:
    # Llama 3 70B (80 layers) on 131 072 H100s, 16 384 sequences of 8 192 tokens a step: tensor 4 or 8 × pipeline
    # 4 or 8 leaves data 8 192, 4 096, 4 096 or 2 048, each dividing 16 384 / micro-batch (1 or 2): 2 × 2 × 2 × 2 =
    # 16 configurations, none invalid. Each answered is the step the estimate endpoint answers for its layout.
    search = {"tensor": [4, 8], "sequence_parallel": [True], "pipeline": [4, 8], "schedule": ["1f1b"],
              "sharding": [{"zero": 1}], "micro_batch": [1, 2], "recompute": ["none", "selective"]}  # fmt: skip
    body = {"model": "llama-3-70b", "hardware": "h100-sxm", "devices": 131_072, "sequence": 8192,
            "global_batch": 16_384, "train_tokens": 15e12, "max_results": 3, "search": search}  # fmt: skip
    doc = plan(client, body)
    assert (doc["searched"], doc["invalid"]) == (16, 0)
    assert doc["searched"] == doc["pruned_for_memory"] + doc["evaluated"] and doc["evaluated"] > 0
    for c in doc["configurations"]:
        lay = c["layout"]
        assert lay["devices"] == 131_072 == lay["tensor"] * lay["pipeline"] * lay["data"]
        single = {k: v for k, v in body.items() if k not in ("search", "max_results")} | {
            "parallelism": {"tensor": lay["tensor"], "sequence_parallel": True, "pipeline": lay["pipeline"]},
            "sharding": {"zero": 1}, "micro_batch": lay["micro_batch"], "recompute": lay["recompute"],
        }  # fmt: skip
        assert client.post("/v1/estimate/training", json=single).json() == c["estimate"]
        reduce = {r["name"]: r for r in c["estimate"]["communication"]}["zero_reduce_scatter"]
        assert reduce["devices"] == lay["data"]


def test_a_plan_for_2_to_the_20_devices_answers(client: TestClient) -> None:
    # Llama 3 8B on 1 048 576 H100s: tensor 1 (data 2²⁰) and 8 (data 2¹⁷) both divide a 2²⁰-sequence batch.
    body = {"model": "llama-3-8b", "hardware": "h100-sxm", "devices": 1 << 20, "sequence": 8192,
            "global_batch": 1 << 20, "train_tokens": 15e12,
            "search": {"tensor": [1, 8], "sequence_parallel": [True], "pipeline": [1], "sharding": [{"zero": 1}],
                       "micro_batch": [1], "recompute": ["none"]}}  # fmt: skip
    doc = plan(client, body)
    assert (doc["searched"], doc["invalid"]) == (2, 0)
    assert {c["layout"]["data"] for c in doc["configurations"]} <= {1 << 20, 1 << 17}
    assert doc["configurations"] and all(c["layout"]["devices"] == 1 << 20 for c in doc["configurations"])
