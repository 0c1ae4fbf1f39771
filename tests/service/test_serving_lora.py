"""POST /v1/estimate/serving with LoRA adapters (issue 41): the slots' memory by hand, vLLM's max_loras rule,
adapter loads, a trace's adapter column, a seeded run repeated, and bad input each a 422 naming the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.serving import ServingRead

PATH = "/v1/estimate/serving"
LORA: dict[str, Any] = {
    "model": "llama-3-8b",
    "hardware": "h100-sxm",
    "engine": {"max_loras": 4, "max_cpu_loras": 8, "max_lora_rank": 16},
    "load": {
        "rate_per_s": 20.0, "requests": 300, "adapters": {"count": 32, "rank": 16, "popularity": "zipf"},
        "prompt_tokens": {"kind": "fixed", "value": 512}, "output_tokens": {"kind": "fixed", "value": 64},
    },
}  # fmt: skip
# Llama-3-8B: hidden 4096, 32 heads and 8 KV heads of 128, MLP 14 336, 32 layers. (d_in + d_out) per layer:
# q 4096 + 4096, k 4096 + 1024, v 4096 + 1024, o 4096 + 4096, gate and up 4096 + 14 336, down 14 336 + 4096
# = 8192 + 5120 + 5120 + 8192 + 3 × 18 432 = 81 920. A rank-16 slot in bf16: 16 × 81 920 × 32 × 2 = 83 886 080 bytes.
SLOT = 16 * 81_920 * 32 * 2


def with_(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    *parents, leaf = path.split(".")
    node = doc
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return doc


def rejected(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    return [d["field"] for d in response.json()["detail"]]


def test_adapters_take_their_slots_from_the_kv_pool_and_max_loras_caps_the_batch(client: TestClient) -> None:
    response = client.post(PATH, json=LORA)
    assert response.status_code == 200, response.text
    doc = ServingRead.model_validate(response.json())
    assert doc.lora is not None
    assert doc.lora.memory_bytes_per_device == 4 * SLOT
    assert doc.lora.rank == 16
    assert doc.lora.max_adapters_per_iteration == 4
    assert doc.lora.delayed_requests > 0
    assert doc.lora.loads >= doc.lora.adapters  # every adapter named is loaded at least once
    assert doc.lora.host_misses >= doc.lora.adapters
    base = client.post(PATH, json={**LORA, "load": {k: v for k, v in LORA["load"].items() if k != "adapters"}}).json()
    assert base["lora"] is None
    # 4 slots of 83 886 080 bytes out of the pool: 335 544 320 / (32 layers × 8 × 128 × 2 (K, V) × 2 bytes × 32
    # tokens a block = 4 194 304 bytes) = 80 blocks fewer
    assert base["kv_cache_blocks"][0] - doc.kv_cache_blocks[0] == 80
    assert doc.ttft_s.mean > base["ttft_s"]["mean"]
    # a seeded run is repeatable
    again = client.post(PATH, json=LORA).json()
    assert again["lora"] == response.json()["lora"] and again["ttft_s"] == response.json()["ttft_s"]


def test_max_loras_caps_every_simulated_iteration(client: TestClient) -> None:
    for max_loras in (1, 3):
        body = with_(with_(LORA, "engine.max_loras", max_loras), "engine.max_cpu_loras", None)
        doc = client.post(PATH, json={**body, "series": True}).json()
        assert doc["lora"]["max_adapters_per_iteration"] == max_loras
        assert doc["lora"]["memory_bytes_per_device"] == max_loras * SLOT
        counts = [point["adapters"] for point in doc["series"]]
        assert max(counts) == max_loras and min(counts) >= 1  # every request names an adapter


def test_a_traces_adapter_column(client: TestClient) -> None:
    # Four requests, adapters 7, 9, 7 and the base model: two adapters, each loaded once (max_loras 2 holds both),
    # both missing the host cache; their rank is the engine's max_lora_rank.
    trace = [
        {"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 10, "adapter": 7},
        {"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 10, "adapter": 9},
        {"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 10, "adapter": 7},
        {"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 10},
    ]
    body = {"model": "llama-3-8b", "hardware": "h100-sxm", "engine": {"max_loras": 2, "max_lora_rank": 32},
            "load": {"trace": trace}}  # fmt: skip
    response = client.post(PATH, json=body)
    assert response.status_code == 200, response.text
    lora = response.json()["lora"]
    assert (lora["adapters"], lora["rank"], lora["loads"], lora["host_misses"]) == (2, 32, 2, 2)
    assert lora["delayed_requests"] == 0
    # one adapter per batch: adapter 9 waits for adapter 7's two requests
    lora = client.post(PATH, json=with_(body, "engine.max_loras", 1)).json()["lora"]
    assert (lora["delayed_requests"], lora["max_adapters_per_iteration"]) == (1, 1)


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("engine.max_loras", 0, "body.engine.max_loras"),
        ("engine.max_lora_rank", 20, "body.engine.max_lora_rank"),
        ("engine.max_cpu_loras", 2, "body.engine.max_cpu_loras"),
        ("load.adapters", {"count": 4, "rank": 32}, "body.load.adapters.rank"),
        ("load.adapters", {"count": 0}, "body.load.adapters.count"),
        ("load.adapters", {"count": 4, "popularity": "pareto"}, "body.load.adapters.popularity"),
    ],
)
def test_bad_lora_input_is_a_422_naming_the_field(client: TestClient, path: str, value: Any, field: str) -> None:
    assert rejected(client.post(PATH, json=with_(LORA, path, value))) == [field]


def test_a_trace_names_its_own_adapters_and_loads_need_a_host_link(client: TestClient) -> None:
    body = copy.deepcopy(LORA)
    body["load"] = {"trace": [{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2}], "adapters": {"count": 2}}
    assert rejected(client.post(PATH, json=body)) == ["body.load.adapters"]
    body = with_(LORA, "hardware", "cpu-generic")  # no host link
    body["dtypes"] = {"weights": "fp32", "activations": "fp32"}
    body["engine"]["memory_fraction"] = 1.0
    assert rejected(client.post(PATH, json=body)) == ["body.load.adapters"]


def test_disaggregated_pools_each_load_their_adapters(client: TestClient) -> None:
    # Adapters 7, 9, 7 on one prefill and one decode worker, max_loras 2 each: each worker loads both adapters once
    # (4 loads, 4 host misses: each worker has its own host cache), and each holds its own slots.
    trace = [{"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 10, "adapter": a} for a in (7, 9, 7)]
    pool = {"workers": 1, "engine": {"max_loras": 2}}
    body = {"model": "llama-3-8b", "hardware": "h100-sxm", "mode": "disaggregated", "prefill": pool, "decode": pool,
            "load": {"trace": trace}}  # fmt: skip
    response = client.post(PATH, json=body)
    assert response.status_code == 200, response.text
    lora = response.json()["lora"]
    assert (lora["adapters"], lora["loads"], lora["host_misses"]) == (2, 4, 4)
    assert lora["memory_bytes_per_device"] == 2 * SLOT
