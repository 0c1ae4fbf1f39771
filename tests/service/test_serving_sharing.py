"""POST /v1/estimate/serving with loads that share prefixes (issue 41): prefix caching's counts by hand, sessions,
routers, the host tier, and bad input each a 422 naming the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.serving import ServingRead

PATH = "/v1/estimate/serving"
SHARED: dict[str, Any] = {
    "model": "llama-3-8b",
    "hardware": "h100-sxm",
    "load": {
        "rate_per_s": 2.0, "requests": 200, "prefix_tokens": 2048,
        "prompt_tokens": {"kind": "fixed", "value": 100}, "output_tokens": {"kind": "fixed", "value": 50},
    },
}  # fmt: skip


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


def test_a_prefix_shared_by_all_is_computed_once(client: TestClient) -> None:
    # 200 prompts of 2 048 shared + 100 own tokens (2 148), blocks of 32: 67 full blocks each, the first 64 the
    # shared prefix. The first request computes everything; every later one finds the 64 prefix blocks (2 048
    # tokens) and computes its own 100: prefilled 2 148 + 199 × 100 = 22 048 of 429 600 tokens.
    response = client.post(PATH, json=SHARED)
    assert response.status_code == 200, response.text
    doc = ServingRead.model_validate(response.json())
    assert doc.prefix_cache is not None
    total = doc.prefix_cache.total
    assert (total.prompt_tokens, total.prefilled_tokens) == (200 * 2148, 2148 + 199 * 100)
    assert (total.lookup_blocks, total.hit_blocks) == (200 * 67, 199 * 64)
    assert doc.prefix_cache.block_tokens == 32
    off = client.post(PATH, json=with_(SHARED, "engine.prefix_caching", False)).json()
    assert off["prefix_cache"] is None
    assert off["ttft_s"]["mean"] > doc.ttft_s.mean


def test_sessions_reuse_their_history(client: TestClient) -> None:
    # Sessions of 3 turns, 64 new tokens and 64 output tokens a turn, blocks of 32, an unbounded cache (a few
    # sessions at a time): turn 1 computes 64; turn 2's prompt is 64 + 64 + 64 = 192, its first 128 cached;
    # turn 3's 320, 256 cached. 60 turns = 20 sessions: prefilled 60 × 64 of 20 × (64 + 192 + 320).
    body = {
        "model": "llama-3-8b", "hardware": "h100-sxm",
        "load": {
            "rate_per_s": 0.5, "requests": 60, "sessions": {"turns": {"value": 3}, "think_s": {"value": 1.0}},
            "prompt_tokens": {"value": 64}, "output_tokens": {"value": 64},
        },
    }  # fmt: skip
    doc = client.post(PATH, json=body).json()
    total = doc["prefix_cache"]["total"]
    assert (total["prompt_tokens"], total["prefilled_tokens"]) == (20 * (64 + 192 + 320), 60 * 64)
    # every later turn is sent a second after the one before ends: each session spans its turns and two seconds
    assert doc["requests"] == 60


def test_a_closed_loop_of_sessions(client: TestClient) -> None:
    body = {
        "model": "llama-3-8b", "hardware": "h100-sxm",
        "load": {
            "concurrency": 4, "requests": 40, "prefix_tokens": 512,
            "sessions": {"turns": {"kind": "uniform", "low": 1, "high": 4}, "think_s": {"kind": "exponential",
                                                                                        "mean": 0.5}},
            "prompt_tokens": {"value": 64}, "output_tokens": {"value": 64},
        },
    }  # fmt: skip
    doc = client.post(PATH, json=body).json()
    assert doc["requests"] == 40
    assert doc["mean_in_system"] <= 4 + 1e-9  # never more than the users


def test_the_prefix_aware_router_and_groups(client: TestClient) -> None:
    body = with_(SHARED, "load.prefix_groups", {"count": 4, "popularity": "zipf", "zipf_exponent": 1.0})
    body["replicas"] = 4
    rr = client.post(PATH, json=body).json()
    aware = client.post(PATH, json=with_(body, "router", "prefix_aware")).json()
    # round robin: each replica computes each group's prefix it sees; prefix aware: each group's prefix mostly once
    assert aware["prefix_cache"]["total"]["prefilled_tokens"] < rr["prefix_cache"]["total"]["prefilled_tokens"]
    assert len(rr["prefix_cache"]["engines"]) == 4
    least = client.post(PATH, json=with_(body, "router", "least_loaded"))
    assert least.status_code == 200, least.text


def test_a_host_tier_needs_a_host_link(client: TestClient) -> None:
    ok = client.post(PATH, json=with_(SHARED, "engine.host_cache_bytes", 64e9))
    assert ok.status_code == 200, ok.text
    body = with_(with_(SHARED, "engine.host_cache_bytes", 64e9), "hardware", "cpu-generic")  # no host link
    body["dtypes"] = {"weights": "fp32", "activations": "fp32"}
    body["engine"]["memory_fraction"] = 1.0
    assert rejected(client.post(PATH, json=body)) == ["body.engine.host_cache_bytes"]


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("load.sessions", {"turns": {"value": 0}}, "body.load.sessions.turns.value"),
        ("load.sessions", {"turns": {"value": 2}, "think_s": {"value": -1}}, "body.load.sessions.think_s.value"),
        ("load.sessions", {"turns": {"value": 2}, "think_s": {"kind": "exponential"}}, "body.load.sessions.think_s"),
        ("load.prefix_groups", {"count": 0}, "body.load.prefix_groups.count"),
        ("load.prefix_tokens", 0, "body.load.prefix_tokens"),
        ("load.prefix_tokens", 8192, "body.load.prefix_tokens"),
        ("engine.host_cache_bytes", -1, "body.engine.host_cache_bytes"),
        ("router", "random", "body.router"),
    ],
)
def test_bad_sharing_is_a_422_naming_the_field(client: TestClient, path: str, value: Any, field: str) -> None:
    assert rejected(client.post(PATH, json=with_(SHARED, path, value))) == [field]


def test_prefix_groups_need_a_prefix_length(client: TestClient) -> None:
    body = with_(SHARED, "load.prefix_groups", {"count": 3})
    del body["load"]["prefix_tokens"]
    assert rejected(client.post(PATH, json=body)) == ["body.load.prefix_groups"]
