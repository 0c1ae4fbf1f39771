"""POST /v1/plan over HTTP, on SQLite and PostgreSQL: configurations that meet the objectives, cheapest first, and
the closest misses when none does. Arithmetic of sizing by hand: replicas = ⌈demand / (batch / total time)⌉."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.plan import PlanRead
from service.examples import PLAN_EXAMPLES

BASE: dict[str, Any] = {
    "model": "llama-3-8b",
    "hardware": ["a100-sxm-80gb", "h100-sxm"],
    "traffic": {"requests_per_s": 10, "prompt_tokens": 1024, "output_tokens": 128},
    "objectives": {"time_to_first_token_s": 2.0, "time_per_output_token_s": 0.05},
    "search": {"tensor": [1, 2], "batch": [1, 8, 32], "dtypes": [{"weights": "bf16"}, {"weights": "fp8"}]},
    "prices": {"a100-sxm-80gb": 1.5, "h100-sxm": 3.0},
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


@pytest.mark.parametrize("name", list(PLAN_EXAMPLES))
def test_every_swagger_example_answers(client: TestClient, name: str) -> None:
    result = plan(client, PLAN_EXAMPLES[name]["value"])
    assert result["feasible"] or result["closest"]


def test_feasible_configurations_meet_every_objective_cheapest_first(client: TestClient) -> None:
    r = plan(client, BASE)
    assert r["ranked_by"] == "cost"
    # fp8 weights on an A100 (no fp8 matmul) still run: weight-only quantisation computes in bf16.
    assert r["evaluated"] == 2 * 2 * 3 * 2 and r["skipped_count"] == 0
    feasible = r["feasible"]
    assert feasible and not r["closest"]
    costs = [c["cost_per_hour"] for c in feasible]
    assert costs == sorted(costs)
    for c in feasible:
        assert c["meets"] and not c["misses"] and c["fits"]
        assert c["time_to_first_token_s"] <= 2.0 and c["time_per_output_token_s"] <= 0.05
        est = c["estimate"]
        assert est["prefill_time_s"] == c["time_to_first_token_s"]
        assert est["time_per_output_token_s"] == c["time_per_output_token_s"]
        per_replica = c["batch"] / est["total_time_s"]  # requests per second of one replica
        assert c["requests_per_s_per_replica"] == pytest.approx(per_replica)
        assert c["replicas"] == math.ceil(10 / per_replica)
        assert c["devices"] == c["replicas"] * c["tensor"]
        assert c["cost_per_hour"] == pytest.approx(c["devices"] * BASE["prices"][c["hardware"]])
        # The traffic asks for 10 requests/s × 128 output tokens = 1280 tokens/s, 4.608 M tokens an hour: the fleet's
        # cost per million is its hourly cost over those, whatever capacity it leaves idle.
        assert c["cost_per_million_tokens"] == pytest.approx(c["cost_per_hour"] / 4.608)
        assert c["utilisation"] == pytest.approx(10 / (c["replicas"] * per_replica)) and c["utilisation"] <= 1
        assert c["batch_fill_s"] == pytest.approx(c["batch"] / (10 / c["replicas"]))  # B at 10/replicas per second


def test_a_token_rate_is_sized_in_tokens(client: TestClient) -> None:
    """2560 output tokens/s of 128-token answers is 20 requests/s: replicas = ⌈2560 / (B · 128 / total time)⌉."""
    traffic = {"output_tokens_per_s": 2560, "prompt_tokens": 1024, "output_tokens": 128}
    r = plan(client, {**BASE, "traffic": traffic})
    for c in r["feasible"]:
        tokens_per_s = c["batch"] * 128 / c["estimate"]["total_time_s"]
        assert c["output_tokens_per_s_per_replica"] == pytest.approx(tokens_per_s)
        assert c["replicas"] == math.ceil(2560 / tokens_per_s)
        assert c["batch_fill_s"] == pytest.approx(c["batch"] * c["replicas"] / 20)
        assert c["cost_per_million_tokens"] == pytest.approx(c["cost_per_hour"] / (2560 * 3600) * 1e6)


def test_without_prices_the_fewest_devices_rank_first(client: TestClient) -> None:
    r = plan(client, {**BASE, "prices": {}})
    assert r["ranked_by"] == "devices"
    devices = [c["devices"] for c in r["feasible"]]
    assert devices == sorted(devices)
    assert all(c["cost_per_hour"] is None for c in r["feasible"])


def test_when_nothing_meets_the_closest_say_what_they_miss(client: TestClient) -> None:
    body = {**BASE, "objectives": {"time_to_first_token_s": 1e-4, "time_per_output_token_s": 1e-4}}
    r = plan(client, body)
    assert not r["feasible"]
    closest = r["closest"]
    assert len(closest) == 10
    worst = [max(m["ratio"] for m in c["misses"]) for c in closest]
    assert worst == sorted(worst)
    for c in closest:
        assert not c["meets"]
        objectives = {m["objective"] for m in c["misses"]}
        assert {"time_to_first_token_s", "time_per_output_token_s"} <= objectives
        for m in c["misses"]:
            assert m["predicted"] > m["target"] and m["ratio"] == pytest.approx(m["predicted"] / m["target"])


def test_memory_and_device_limits_are_objectives(client: TestClient) -> None:
    body = {
        **BASE,
        "model": "llama-3-70b",
        "hardware": ["h100-sxm"],
        "search": {"tensor": [1], "batch": [1]},
        "prices": {},
    }
    r = plan(client, body)
    (only,) = r["closest"]
    assert {m["objective"] for m in only["misses"]} >= {"memory"}  # 141 GB of weights on an 80 GB device
    capped = plan(client, {**BASE, "search": {**BASE["search"], "max_devices": 1}, "objectives": {}})
    for c in capped["feasible"]:
        assert c["devices"] <= 1


def test_configurations_that_cannot_run_are_skipped_and_said(client: TestClient) -> None:
    r = plan(client, {**BASE, "search": {**BASE["search"], "tensor": [1, 3]}})
    assert r["skipped_count"] == 2 * 2 * 3  # tensor 3 on both profiles, both dtypes, every batch
    assert any("tensor 3" in s and "does not divide" in s for s in r["skipped"])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"traffic": {"prompt_tokens": 1, "output_tokens": 1}}, "body.traffic"),
        (
            {"traffic": {"requests_per_s": 1, "output_tokens_per_s": 1, "prompt_tokens": 1, "output_tokens": 1}},
            "body.traffic",
        ),
        ({"hardware": []}, "body.hardware"),
        ({"hardware": [{"slug": "x"}]}, "body.hardware.0.name"),
        ({"search": {"tensor": [2, 2]}}, "body.search.tensor"),
        ({"search": {"batch": list(range(1, 65)), "tensor": list(range(1, 65)), "dtypes": [{}] * 8}}, "body.search"),
        ({"objectives": {"time_to_first_token_s": 0}}, "body.objectives.time_to_first_token_s"),
        ({"prices": {"h100-sxm": -2}}, "body.prices.h100-sxm"),
    ],
)
def test_bad_input_names_the_field(client: TestClient, change: dict[str, Any], field: str) -> None:
    assert field in rejected(client.post("/v1/plan", json={**BASE, **change}))
