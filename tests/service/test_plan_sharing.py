"""POST /v1/plan with traffic that shares prefixes (issue 41): the search over prefix caching and a host tier, what
caching does to the fleet, the engines' flags, and bad input."""

from __future__ import annotations

import copy
import json
import shlex
from typing import Any

import yaml
from fastapi.testclient import TestClient

from schemas.plan import PlanRead

BASE: dict[str, Any] = {
    "model": "llama-3-8b",
    "hardware": ["h100-sxm"],
    "traffic": {"requests_per_s": 20, "prompt_tokens": 128, "output_tokens": 64, "prefix_tokens": 3968},
    "objectives": {"ttft_s": 0.5, "tpot_s": 0.03},
    "search": {"tensor": [1], "max_num_seqs": [32, 64], "max_num_batched_tokens": [8192],
               "prefix_caching": [True, False]},
    "max_results": 4,
}  # fmt: skip


def plan(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    PlanRead.model_validate(result)
    return result


def test_a_shared_prefix_needs_fewer_devices_with_prefix_caching(client: TestClient) -> None:
    # Every prompt is a 3 968-token prefix and 128 tokens of its own: with caching an engine computes the 128 (and
    # its attention reads the 4 096 keys), without it all 4 096, so a cached engine serves more and the best fleet
    # caches. Its commands say so.
    result = plan(client, BASE)
    best = result["feasible"][0]
    assert "prefix cache" not in best["label"]  # the default, caching without a host tier, is not named
    off = copy.deepcopy(BASE)
    off["search"]["prefix_caching"] = [False]
    uncached = plan(client, off)
    # ⌈demand / a unit's throughput⌉ units: 20 requests/s over ~47 per cached engine is one; over ~9 per uncached
    # engine (every prompt's 4 096 tokens computed) three.
    fleets = uncached["feasible"] or uncached["closest"]
    assert best["units"] == -(-20 // best["operating_point"]["requests_per_s"]) == 1
    assert min(c["devices"] for c in fleets) >= 3 * best["devices"]
    assert best["operating_point"]["requests_per_s"] > 4 * max(c["operating_point"]["requests_per_s"] for c in fleets)
    vllm = shlex.split(best["export"]["vllm"][0]["command"])
    assert "--enable-prefix-caching" in vllm
    options = yaml.safe_load(best["export"]["trtllm"][0]["config_yaml"])
    assert options["kv_cache_config"]["enable_block_reuse"] is True
    plain = shlex.split(fleets[0]["export"]["vllm"][0]["command"])
    assert "--no-enable-prefix-caching" in plain


def test_a_host_tier_is_searched_and_exported(client: TestClient) -> None:
    body = copy.deepcopy(BASE)
    body["search"]["prefix_caching"] = [True]
    body["search"]["host_cache_bytes"] = [0, 64e9]
    result = plan(client, body)
    hosted = [c for c in result["feasible"] + result["closest"] if "+ host 64 GB" in c["label"]]
    assert hosted
    args = shlex.split(hosted[0]["export"]["vllm"][0]["command"])
    config = json.loads(args[args.index("--kv-transfer-config") + 1])
    assert config["kv_connector"] == "OffloadingConnector"
    assert config["kv_connector_extra_config"]["num_cpu_blocks"] > 0
    options = yaml.safe_load(hosted[0]["export"]["trtllm"][0]["config_yaml"])
    assert options["kv_cache_config"]["host_cache_size"] == 64_000_000_000


def test_sessions_plan(client: TestClient) -> None:
    body = copy.deepcopy(BASE)
    del body["traffic"]["prefix_tokens"]
    body["traffic"]["sessions"] = {"turns": {"kind": "uniform", "low": 1, "high": 6}}
    result = plan(client, body)
    assert result["feasible"] or result["closest"]


def test_bad_sharing_traffic_is_a_422(client: TestClient) -> None:
    body = copy.deepcopy(BASE)
    body["traffic"]["prefix_groups"] = {"count": 3}
    del body["traffic"]["prefix_tokens"]
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 422
    assert [d["field"] for d in response.json()["detail"]] == ["body.traffic"]
    body = copy.deepcopy(BASE)
    body["search"]["host_cache_bytes"] = [-1]
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 422
    assert response.json()["detail"][0]["field"].startswith("body.search.host_cache_bytes")


def test_lora_traffic_plans_and_exports_vllms_flags(client: TestClient) -> None:
    body = copy.deepcopy(BASE)
    del body["traffic"]["prefix_tokens"]
    body["traffic"]["adapters"] = {"count": 16, "rank": 16, "popularity": "zipf"}
    body["engine"] = {"max_loras": 4, "max_cpu_loras": 8, "max_lora_rank": 16}
    body["search"]["prefix_caching"] = [True]
    result = plan(client, body)
    best = (result["feasible"] or result["closest"])[0]
    args = shlex.split(best["export"]["vllm"][0]["command"])
    assert "--enable-lora" in args
    flags = {flag: args[args.index(flag) + 1] for flag in ("--max-loras", "--max-lora-rank", "--max-cpu-loras")}
    assert flags == {"--max-loras": "4", "--max-lora-rank": "16", "--max-cpu-loras": "8"}
    assert any("LoRA" in note for note in best["export"]["notes"])
    # the same traffic without adapters plans without them
    del body["traffic"]["adapters"]
    plain = plan(client, body)
    assert "--enable-lora" not in shlex.split(
        (plain["feasible"] or plain["closest"])[0]["export"]["vllm"][0]["command"]
    )
    # an adapter above the engine's max_lora_rank is refused
    body["traffic"]["adapters"] = {"count": 16, "rank": 64}
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 422, response.text
    assert [d["field"] for d in response.json()["detail"]] == ["body.traffic.adapters.rank"]
    body["traffic"]["adapters"]["rank"] = 16
    body["engine"]["max_loras"] = 0
    response = client.post("/v1/plan", json=body)
    assert [d["field"] for d in response.json()["detail"]] == ["body.engine.max_loras"]
