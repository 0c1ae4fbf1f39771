"""POST /v1/plan over HTTP, on SQLite and PostgreSQL: fleets that meet the objectives under the traffic, cheapest
first, sized by hand from their operating points; the engines' launch arguments; the Pareto frontier and its chart;
the closest misses when nothing meets; bad input."""

from __future__ import annotations

import json
import math
import shlex
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from schemas.plan import PlanRead
from service.examples import PLAN_EXAMPLES

BASE: dict[str, Any] = {
    "model": "llama-3-8b",
    "hardware": ["a100-sxm-80gb", "h100-sxm"],
    "traffic": {"requests_per_s": 10, "prompt_tokens": 1024, "output_tokens": 128},
    "objectives": {"ttft_s": 0.5, "tpot_s": 0.03},
    "search": {"tensor": [1, 2], "max_num_seqs": [16, 64], "max_num_batched_tokens": [4096]},
    "prices": {"a100-sxm-80gb": 1.5, "h100-sxm": 3.0},
    "max_results": 4,
}


def plan(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    PlanRead.model_validate(result)
    return result


def rejected(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) == {"error", "message", "detail"}
    return [d["field"] for d in body["detail"]]


def test_the_planner_is_a_group_of_its_own_in_swagger(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    operations = [
        op for path in ("/v1/plan", "/v1/plan/frontier.svg", "/v1/plan/frontier.png") for op in paths[path].values()
    ]
    # Not under "inference": a plan runs the serving simulator, not one static batch.
    assert {tuple(op["tags"]) for op in operations} == {("plan",)}


@pytest.mark.parametrize("name", list(PLAN_EXAMPLES))
def test_every_swagger_example_answers(client: TestClient, name: str) -> None:
    result = plan(client, PLAN_EXAMPLES[name]["value"])
    assert result["feasible"] or result["closest"]


def test_fleets_meet_the_objectives_under_the_traffic_cheapest_first(client: TestClient) -> None:
    r = plan(client, BASE)
    assert r["ranked_by"] == "cost" and r["candidates"] == 2 * 2 * 2
    assert r["evaluated"] + r["pruned"] + r["invalid_count"] == r["candidates"]
    feasible = r["feasible"]
    assert feasible and not r["closest"]
    costs = [c["cost_per_hour"] for c in feasible]
    assert costs == sorted(costs)
    for c in feasible:
        at = c["at_traffic"]
        assert c["meets"] and not c["misses"] and at is not None
        assert at["ttft_s"]["p90"] <= 0.5 and at["tpot_s"]["p90"] <= 0.03
        (engine,) = c["engines"]
        assert c["devices_per_unit"] == engine["tensor"] and c["devices"] == c["units"] * engine["tensor"]
        op = c["operating_point"]
        assert op["clients"] == engine["max_num_seqs"]
        # Sized from the operating point: ⌈10 / X⌉ units, more if the traffic check needed them.
        assert c["units"] >= math.ceil(10 / op["requests_per_s"] - 1e-9)
        assert c["utilisation"] == pytest.approx(10 / (c["units"] * op["requests_per_s"]))
        assert c["cost_per_hour"] == pytest.approx(c["devices"] * BASE["prices"][c["hardware"]])
        # 10 requests/s × 128 output tokens = 1 280 tokens/s, 4.608 M tokens an hour.
        assert c["cost_per_million_tokens"] == pytest.approx(c["cost_per_hour"] / 4.608)
        assert op["output_tokens_per_s"] == pytest.approx(op["requests_per_s"] * 128)
        assert op["output_tokens_per_s_per_device"] == pytest.approx(op["output_tokens_per_s"] / c["devices_per_unit"])
        # The binding objective is the one nearest its bound under the traffic.
        at_ratios = {"ttft_s": at["ttft_s"]["p90"] / 0.5, "tpot_s": at["tpot_s"]["p90"] / 0.03}
        assert c["binding"]["objective"] == max(at_ratios, key=lambda k: at_ratios[k])
        assert c["binding"]["ratio"] == pytest.approx(max(at_ratios.values())) and c["binding"]["ratio"] <= 1


def test_a_token_rate_is_sized_in_requests(client: TestClient) -> None:
    """2 560 output tokens/s of 128-token answers is 20 requests/s."""
    traffic = {"output_tokens_per_s": 2560, "prompt_tokens": 1024, "output_tokens": 128}
    r = plan(client, {**BASE, "traffic": traffic})
    assert r["demand_requests_per_s"] == pytest.approx(20.0)
    for c in r["feasible"]:
        assert c["utilisation"] == pytest.approx(20 / (c["units"] * c["operating_point"]["requests_per_s"]))


def test_a_margin_for_the_models_error_checks_the_intervals_upper_edge(client: TestClient) -> None:
    # The same candidates, checked on the simulated latencies and on their prediction interval's upper edge: each
    # unit's throughput drops to its interval's lower edge, so a fleet needs at least as many units, and every
    # check's prediction is the estimate's × the band's upper factor.
    plain = plan(client, BASE)
    robust = plan(client, {**BASE, "objectives": {**BASE["objectives"], "margin": "interval"}})
    assert plain["margin"] == "estimate" and robust["margin"] == "interval"
    assert "upper edge" in robust["assumptions"]["margin"]
    best = {c["label"]: c for c in plain["feasible"] + plain["closest"]}
    compared = 0
    for c in robust["feasible"] + robust["closest"]:
        mine = best.get(c["label"])
        if mine is None:
            continue
        compared += 1
        point, estimate = c["operating_point"], mine["operating_point"]
        assert point["ttft_s"]["mean"] == pytest.approx(estimate["ttft_s"]["mean"])  # the simulation itself is one
        assert point["ttft_s"]["mean_p90"] > point["ttft_s"]["mean"]
        assert point["requests_per_s"] < estimate["requests_per_s"]
        assert c["units"] >= mine["units"]
    assert compared
    assert fewest_devices(robust) >= fewest_devices(plain)


def fewest_devices(result: dict[str, Any]) -> int:
    return min((c["devices"] for c in result["feasible"]), default=10**9)


def test_without_prices_the_fewest_devices_rank_first(client: TestClient) -> None:
    r = plan(client, {**BASE, "prices": {"h100-sxm": 3.0}})
    assert r["ranked_by"] == "devices"
    devices = [c["devices"] for c in r["feasible"]]
    assert devices == sorted(devices) and all(
        c["cost_per_hour"] is None for c in r["feasible"] if c["hardware"] != "h100-sxm"
    )


def test_the_export_is_what_the_engines_take(client: TestClient) -> None:
    best = plan(client, BASE)["feasible"][0]
    (engine,) = best["engines"]
    export = best["export"]
    (vllm,) = export["vllm"]
    args = shlex.split(vllm["command"])
    assert args[:3] == ["vllm", "serve", "meta-llama/Meta-Llama-3-8B"]
    flag = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}
    assert flag["--tensor-parallel-size"] == str(engine["tensor"])
    assert flag["--max-num-seqs"] == str(engine["max_num_seqs"]) and flag["--max-num-batched-tokens"] == "4096"
    assert "--enable-chunked-prefill" in args and flag["--max-model-len"] == str(1024 + 128)
    assert vllm["instances"] == best["units"]
    (trt,) = export["trtllm"]
    assert trt["command"].startswith("trtllm-serve meta-llama/Meta-Llama-3-8B --backend pytorch")
    options = yaml.safe_load(trt["config_yaml"])
    assert options["tensor_parallel_size"] == engine["tensor"] and options["max_batch_size"] == engine["max_num_seqs"]
    assert options["max_num_tokens"] == 4096 and options["enable_chunked_prefill"] is True
    assert options["scheduler_config"]["capacity_scheduler_policy"] == "GUARANTEED_NO_EVICT"
    assert 0 < options["kv_cache_config"]["free_gpu_memory_fraction"] <= 1
    assert options["kv_cache_config"]["tokens_per_block"] == 32
    assert export["trtllm_disaggregated_yaml"] is None
    assert "--disable-custom-all-reduce" not in args  # the engines' own all-reduce, vLLM's default


def test_an_nccl_all_reduce_is_exported_as_vllm_takes_it(client: TestClient) -> None:
    best = plan(client, {**BASE, "engine": {"all_reduce": "library"}})["feasible"][0]
    (vllm,) = best["export"]["vllm"]
    assert "--disable-custom-all-reduce" in shlex.split(vllm["command"])
    assert any("NCCL all-reduce" in note for note in best["export"]["notes"])


def test_speculative_decoding_is_exported_as_the_engines_take_it(client: TestClient) -> None:
    mtp = {"speculative": {"draft_tokens": 2, "accepted_tokens": 1.4}}
    best = plan(client, {**BASE, "engine": mtp})["feasible"][0]
    (vllm,) = best["export"]["vllm"]
    args = shlex.split(vllm["command"])
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config == {"method": "mtp", "num_speculative_tokens": 2}  # vLLM 0.33 `config/speculative.py`
    (trt,) = best["export"]["trtllm"]
    options = yaml.safe_load(trt["config_yaml"])
    assert options["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 2}
    assert any("1.4 of 2 drafts" in note for note in best["export"]["notes"])
    eagle = {"speculative": {"method": "eagle", "draft_tokens": 3, "accepted_tokens": 2}}
    best = plan(client, {**BASE, "engine": eagle})["feasible"][0]
    (vllm,) = best["export"]["vllm"]
    args = shlex.split(vllm["command"])
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config["method"] == "eagle3" and config["num_speculative_tokens"] == 3
    assert any("draft head's checkpoint" in note for note in best["export"]["notes"])


def test_disaggregated_fleets_export_both_pools_and_the_router(client: TestClient) -> None:
    body = {**BASE, "hardware": ["h100-sxm"], "prices": {"h100-sxm": 3.0},
            "search": {"tensor": [1], "modes": ["disaggregated"], "ratios": [{"prefill": 1, "decode": 2}],
                       "max_num_seqs": [32], "max_num_batched_tokens": [4096]}}  # fmt: skip
    r = plan(client, body)
    c = (r["feasible"] or r["closest"])[0]
    assert c["mode"] == "disaggregated" and c["devices_per_unit"] == 3
    prefill, decode = c["engines"]
    assert (prefill["role"], prefill["workers"], decode["role"], decode["workers"]) == ("prefill", 1, "decode", 2)
    assert c["operating_point"]["clients"] == 2 * 32
    vllm = {x["role"]: x for x in c["export"]["vllm"]}
    assert vllm["prefill"]["instances"] == c["units"] and vllm["decode"]["instances"] == 2 * c["units"]
    assert all("NixlConnector" in x["command"] for x in vllm.values())
    router = yaml.safe_load(c["export"]["trtllm_disaggregated_yaml"])
    assert router["context_servers"]["num_instances"] == c["units"]
    assert router["generation_servers"]["num_instances"] == 2 * c["units"]
    assert len(router["generation_servers"]["urls"]) == 2 * c["units"]


def test_a_huge_disaggregated_fleet_lists_64_servers_in_its_router(client: TestClient) -> None:
    """Devices 100 000 times slower (every efficiency 1e-5) need a vast fleet: the router lists 64 servers of each
    kind and says how many there are (schemathesis found this answer taking longer than the request limit). A
    million times slower would need 3.2 million devices, past the 2²⁰ a fleet may hold: test_limits.py."""
    slow = {"matmul_efficiency": 1e-5, "memory_efficiency": 1e-5, "vector_efficiency": 1e-5}
    body = {**BASE, "hardware": ["h100-sxm"], "options": slow, "objectives": {},
            "search": {"tensor": [1], "modes": ["disaggregated"], "ratios": [{"prefill": 1, "decode": 1}],
                       "max_num_seqs": [8], "max_num_batched_tokens": [4096]}}  # fmt: skip
    c = plan(client, body)["feasible"][0]
    assert c["units"] > 64
    router = yaml.safe_load(c["export"]["trtllm_disaggregated_yaml"])
    assert router["context_servers"]["num_instances"] == c["units"]
    assert len(router["context_servers"]["urls"]) == 64
    assert f"the router configuration lists the first 64 of {c['units']} prefill servers" in c["export"]["notes"]


def test_the_frontier_is_not_dominated_and_is_drawn(client: TestClient) -> None:
    r = plan(client, BASE)
    front = [(p["output_tokens_per_s_per_user"], p["output_tokens_per_s_per_device"]) for p in r["frontier"]]
    assert front
    for a in front:
        assert not any(b[0] >= a[0] and b[1] >= a[1] and b != a for b in front)
    users = [p[0] for p in front]
    assert users == sorted(users, reverse=True)
    svg = client.post("/v1/plan/frontier.svg", json=BASE)
    assert svg.status_code == 200 and svg.headers["content-type"] == "image/svg+xml"
    assert b"<svg" in svg.content and b"Pareto frontier" in svg.content
    png = client.post("/v1/plan/frontier.png", json=BASE)
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"


def test_when_nothing_meets_the_closest_say_what_they_miss(client: TestClient) -> None:
    r = plan(client, {**BASE, "objectives": {"ttft_s": 1e-4, "tpot_s": 1e-4}})
    assert not r["feasible"] and r["closest"]
    ratios = []
    for c in r["closest"]:
        assert not c["meets"] and c["misses"]
        assert {m["objective"] for m in c["misses"]} <= {"ttft_s", "tpot_s"}
        for m in c["misses"]:
            assert m["ratio"] == pytest.approx(m["predicted"] / m["target"]) and m["ratio"] > 1
        ratios.append(max(m["ratio"] for m in c["misses"]))
    assert ratios == sorted(ratios)


def test_a_device_limit_is_an_objective(client: TestClient) -> None:
    r = plan(client, {**BASE, "search": {**BASE["search"], "max_devices": 1}, "traffic": {**BASE["traffic"],
              "requests_per_s": 200}})  # fmt: skip
    for c in r["feasible"]:
        assert c["devices"] <= 1
    for c in r["closest"]:
        limit = [m for m in c["misses"] if m["objective"] == "devices"]
        assert (c["devices"] > 1) == bool(limit)
        assert all(m["target"] == 1 and m["predicted"] == c["devices"] for m in limit)


def test_candidates_that_cannot_run_are_said(client: TestClient) -> None:
    body = {**BASE, "search": {**BASE["search"], "dtypes": [{"weights": "fp8", "activations": "fp8"}]}}
    r = plan(client, body)
    # The A100 has no fp8 matrix rate: its 4 candidates cannot run; the H100's can.
    assert r["invalid_count"] == 4 and all("a100-sxm-80gb" in s and "fp8" in s for s in r["invalid"])
    assert all(c["hardware"] == "h100-sxm" for c in r["feasible"])


def test_a_plan_s_work_is_bounded_before_it_starts(client: TestClient) -> None:
    # 16 profiles × 4 tensor widths × 2 budgets × Σ (2 × seqs + 64) over 1 024, 1 000, 900, 800, 700, 600 (10 432
    # requests), each ⌈1 024 / budget⌉ + 2 = 3 iterations: 16 × 4 × 2 × 10 432 × 3 = 4 005 888 iterations (768
    # candidates, 64 engines: both within their limits): past the 1 000 000 a request simulates, so a job (202).
    seqs = [1024, 1000, 900, 800, 700, 600]
    search = {"tensor": [1, 2, 4, 8], "max_num_seqs": seqs, "max_num_batched_tokens": [2048, 8192]}
    body = {**BASE, "hardware": ["h100-sxm"] * 16, "prices": {}, "search": search}
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 202 and response.headers["Location"].startswith("/v1/jobs/")
    # 8 000-token prompts in chunks of 64: ⌈8 000 / 64⌉ + 2 = 127 iterations a request, 16 × 4 × 10 432 × 127 =
    # 84 791 296: past the 40 000 000 a job may simulate, a 422.
    huge = {**body, "traffic": {**BASE["traffic"], "prompt_tokens": 8000},
            "search": {**search, "max_num_batched_tokens": [64]}}  # fmt: skip
    response = client.post("/v1/plan", json=huge)
    assert rejected(response) == ["body.search"]
    assert "about 84791296 iterations" in response.json()["detail"][0]["message"]
    # A token budget under 64 is refused: it would make each prompt that many iterations.
    tiny = {"tensor": [1], "max_num_seqs": [8], "max_num_batched_tokens": [1]}
    response = client.post("/v1/plan", json={**BASE, "hardware": ["h100-sxm"], "search": tiny})
    assert rejected(response) == ["body.search.max_num_batched_tokens.0"]
    # 16 profiles × 9 tensor widths = 144 engines, each a surface: over the 128 allowed.
    body["search"] = {"tensor": list(range(1, 10)), "max_num_seqs": [8], "max_num_batched_tokens": [2048]}
    response = client.post("/v1/plan", json=body)
    assert rejected(response) == ["body.search"]
    assert "144 distinct engines" in response.json()["detail"][0]["message"]


def test_a_search_where_nothing_runs_is_a_422(client: TestClient) -> None:
    body = {**BASE, "model": "llama-3.1-405b", "hardware": ["h100-sxm"], "search": {"tensor": [1, 2]}}
    response = client.post("/v1/plan", json=body)
    assert rejected(response) == ["body.search"]
    assert "none of the" in response.json()["detail"][0]["message"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"traffic": {"prompt_tokens": 10, "output_tokens": 10}}, "body.traffic"),
        ({"traffic": {"requests_per_s": 1, "output_tokens_per_s": 1, "prompt_tokens": 10, "output_tokens": 10}},
         "body.traffic"),
        ({"traffic": {"requests_per_s": 1, "prompt_tokens": 9000, "output_tokens": 10}}, "body.traffic.prompt_tokens"),
        ({"objectives": {"percentile": "p95"}}, "body.objectives.percentile"),
        ({"objectives": {"margin": "p90"}}, "body.objectives.margin"),
        ({"search": {"tensor": [1, 1]}}, "body.search.tensor"),
        ({"search": {"max_num_seqs": [2048]}}, "body.search.max_num_seqs.0"),
        # 2 profiles × 16² tensor pairs × 3 ratios × 7 batches × 2 budgets = 21 504 candidates, past a job's 20 000.
        ({"search": {"modes": ["disaggregated"], "tensor": list(range(1, 17)),
                     "max_num_seqs": [8, 16, 32, 64, 128, 256, 512]}}, "body.search"),
        ({"options": {"calibration": "latest"}}, "body.options"),
        ({"max_results": 0}, "body.max_results"),
    ],
)  # fmt: skip
def test_bad_input_names_the_field(client: TestClient, change: dict[str, Any], field: str) -> None:
    assert field in rejected(client.post("/v1/plan", json={**BASE, **change}))
