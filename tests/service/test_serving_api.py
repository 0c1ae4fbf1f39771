"""POST /v1/estimate/serving over HTTP, on SQLite and PostgreSQL: the examples answer, throughput and latency are
consistent with each other (Little's law, tokens over time), and bad input is a 422 naming the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.serving import ServingRead
from service.examples import SERVING_EXAMPLES

PATH = "/v1/estimate/serving"
BASE: dict[str, Any] = {
    "model": "llama-3-8b",
    "hardware": "h100-sxm",
    "load": {
        "concurrency": 16, "requests": 400,
        "prompt_tokens": {"kind": "fixed", "value": 1024}, "output_tokens": {"kind": "fixed", "value": 128},
    },
}  # fmt: skip


def rejected(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) == {"error", "message", "detail"}
    return [d["field"] for d in body["detail"]]


def with_(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    *parents, leaf = path.split(".")
    node = doc
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return doc


@pytest.mark.parametrize("name", list(SERVING_EXAMPLES))
def test_every_example_answers_a_serving_read(client: TestClient, name: str) -> None:
    response = client.post(PATH, json=SERVING_EXAMPLES[name]["value"])
    assert response.status_code == 200, response.text
    doc = ServingRead.model_validate(response.json())
    assert doc.requests == SERVING_EXAMPLES[name]["value"]["load"]["requests"]
    assert 0 < doc.ttft_s.p50 <= doc.ttft_s.p90 <= doc.ttft_s.p99
    assert doc.surface_error < 0.15


def test_throughput_and_latency_agree(client: TestClient) -> None:
    doc = client.post(PATH, json=BASE).json()
    # 400 requests of 128 output tokens over the run's duration.
    assert doc["output_tokens_per_s"] == pytest.approx(400 * 128 / doc["duration_s"])
    assert doc["output_tokens_per_s_per_device"] == doc["output_tokens_per_s"]  # one device
    # Little: 16 clients in the system but for the drain at the end.
    assert doc["requests_per_s"] * doc["e2e_s"]["mean"] == pytest.approx(doc["mean_in_system"])
    assert 14.5 <= doc["mean_in_system"] <= 16
    # Time per output token × 127 + time to first token = end-to-end latency, per request and so on average.
    assert doc["ttft_s"]["mean"] + 127 * doc["tpot_s"]["mean"] == pytest.approx(doc["e2e_s"]["mean"], rel=1e-9)


def test_the_means_and_throughputs_carry_their_prediction_intervals(client: TestClient) -> None:
    doc = client.post(PATH, json=BASE).json()
    assert "every op at its band's edge together" in doc["assumptions"]["interval"]
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        stats = doc[metric]
        assert stats["mean_p10"] < stats["mean"] < stats["mean_p90"], metric
    assert doc["queue_s"]["mean_p10"] is None
    # Aggregated: end to end and the run's length move by one factor, so throughput's edges are its inverse.
    e2e, run = doc["e2e_s"], doc["output_tokens_per_s"]
    assert doc["output_tokens_per_s_p10"] == pytest.approx(run * e2e["mean"] / e2e["mean_p90"], rel=1e-12)
    assert doc["output_tokens_per_s_p90"] == pytest.approx(run * e2e["mean"] / e2e["mean_p10"], rel=1e-12)
    assert doc["requests_per_s_p10"] == pytest.approx(doc["requests_per_s"] * e2e["mean"] / e2e["mean_p90"])


def test_the_series_follows_the_iterations(client: TestClient) -> None:
    doc = client.post(PATH, json=with_("series", True)).json()
    points = doc["series"]
    assert points and all(p["decoding"] <= 16 for p in points)
    assert points[0]["start_s"] == 0.0 and points[0]["prefill_tokens"] > 0


def test_the_same_seed_gives_the_same_answer(client: TestClient) -> None:
    body = with_("load", {"rate_per_s": 5, "requests": 200, "seed": 9,
                          "prompt_tokens": {"kind": "lognormal", "mean": 800, "std": 300},
                          "output_tokens": {"kind": "uniform", "low": 50, "high": 150}})  # fmt: skip
    assert client.post(PATH, json=body).json() == client.post(PATH, json=body).json()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (with_("load.concurrency", 0), "body.load.concurrency"),
        (with_("load.rate_per_s", 3), "body.load"),
        (with_("load.prompt_tokens", {"kind": "fixed", "value": 9000}), "body.load.prompt_tokens"),
        (with_("load.prompt_tokens", {"kind": "uniform", "low": 10}), "body.load.prompt_tokens"),
        (with_("load.requests", 4), "body.load.requests"),
        (with_("engine.memory_fraction", 0.2), "body.engine.memory_fraction"),
        (with_("engine.scheduler", "fifo"), "body.engine.scheduler"),
        (with_("parallelism.tensor", 3), "body.parallelism.tensor"),
        (with_("mode", "disaggregated"), "body.prefill"),
    ],
)
def test_bad_input_names_the_field(client: TestClient, body: dict[str, Any], field: str) -> None:
    assert field in rejected(client.post(PATH, json=body))


FLEET = 1 << 20  # schemas.limits.MAX_DEVICES


def test_a_fleet_of_a_million_replicas_answers(client: TestClient) -> None:
    # 2²⁰ engines of one H100 under BASE's 16 clients: 16 engines get a client each and run its 25 requests one after
    # another, alike (one loop); the fleet's devices are counted and each request is served alone.
    alone = client.post(PATH, json=with_("load.concurrency", 1)).json()
    doc = client.post(PATH, json=with_("replicas", FLEET)).json()
    assert doc["devices"] == FLEET and doc["requests"] == 400
    assert doc["e2e_s"]["mean"] == pytest.approx(alone["e2e_s"]["mean"], rel=1e-12)
    assert doc["output_tokens_per_s_per_device"] == pytest.approx(doc["output_tokens_per_s"] / FLEET)
    # An open loop: each of 1 000 requests has an engine to itself.
    body = with_("load", {**BASE["load"], "concurrency": None, "rate_per_s": 1e5, "requests": 1000})
    open_loop = client.post(PATH, json={**body, "replicas": FLEET}).json()
    assert open_loop["e2e_s"]["p99"] == pytest.approx(alone["e2e_s"]["mean"], rel=1e-9)
    assert open_loop["queue_s"]["p99"] == 0.0


def test_a_fleet_whose_shares_all_differ_is_bounded(client: TestClient) -> None:
    # 5 000 log-normal requests over 2²⁰ engines: ~5 000 different shares, each its own loop, past the 4 096 allowed.
    load = {"rate_per_s": 100, "requests": 5000, "prompt_tokens": {"kind": "lognormal", "mean": 1000, "std": 500},
            "output_tokens": {"kind": "lognormal", "mean": 200, "std": 100}}  # fmt: skip
    response = client.post(PATH, json={**with_("load", load), "replicas": FLEET})
    assert rejected(response) == ["body.replicas"]
    assert "at most 4096 are allowed" in response.json()["message"]
    # Disaggregated pools of 2²⁰ workers: 64 requests route over 64 + 64 engines; 40 000 would be 3.2 × 10⁹ pairs.
    pools = {"mode": "disaggregated", "prefill": {"workers": FLEET}, "decode": {"workers": FLEET}}
    few = {**BASE["load"], "requests": 64}
    assert client.post(PATH, json={**with_("load", few), **pools}).json()["devices"] == 2 * FLEET
    many = {**BASE["load"], "requests": 40_000}
    assert rejected(client.post(PATH, json={**with_("load", many), **pools})) == ["body.prefill.workers"]


def test_a_trace_going_backwards_is_refused(client: TestClient) -> None:
    trace = [
        {"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 10},
        {"arrival_s": 2.0, "prompt_tokens": 100, "output_tokens": 10},
        {"arrival_s": 1.0, "prompt_tokens": 100, "output_tokens": 10},
    ]
    body = {**BASE, "load": {"trace": trace}}
    assert rejected(client.post(PATH, json=body)) == ["body.load.trace.2.arrival_s"]


def test_a_trace_runs_in_order(client: TestClient) -> None:
    trace = [{"arrival_s": float(i), "prompt_tokens": 100, "output_tokens": 10} for i in range(5)]
    doc = client.post(PATH, json={**BASE, "load": {"trace": trace}}).json()
    # One request per second, each done in well under a second: nobody waits.
    assert doc["requests"] == 5 and doc["queue_s"]["p99"] == 0.0
    assert doc["duration_s"] == pytest.approx(4.0 + doc["e2e_s"]["mean"], rel=1e-6)


def test_an_engine_runs_its_own_all_reduce_over_nvlink(client: TestClient) -> None:
    """`engine.all_reduce`: custom (the engines' default) against NCCL's (`library`), tensor 8 on one H100 node. A
    decode step's all-reduces (16 sequences × 4096 × 2 B = 128 KiB each, 64 a step) take about 2.5 × less as one direct
    kernel than as NCCL's ring (tests/roofline/inference/test_run.py), so every output token is faster; an unknown
    value is a 422 naming the field."""
    tp8 = with_("parallelism.tensor", 8)
    custom = client.post(PATH, json=tp8).json()
    library = client.post(PATH, json={**tp8, "engine": {"all_reduce": "library"}}).json()
    assert custom["tpot_s"]["mean"] < library["tpot_s"]["mean"]
    assert rejected(client.post(PATH, json={**tp8, "engine": {"all_reduce": "nvls"}})) == ["body.engine.all_reduce"]


def test_speculative_decoding_cuts_the_time_per_output_token(client: TestClient) -> None:
    """`engine.speculative`: one client on one H100 with Llama-3-8B, whose decode reads its 16 GB of weights a step.
    Checking 4 positions costs about one step; each of the 3 draft steps reads one of 32 layers and the 1.05 GB LM
    head, ~0.09 of a step (tests/roofline/serving/test_simulator.py). Keeping 2 of 3 drafts: (1 + 3 × 0.09) / 3 ≈ 0.42
    of the time per output token without drafts; the prompt's first token is untouched."""
    one = with_("load.concurrency", 1)
    plain = client.post(PATH, json=one).json()
    body = {**one, "engine": {"speculative": {"method": "mtp", "draft_tokens": 3, "accepted_tokens": 2}}}
    drafted = client.post(PATH, json=body)
    assert drafted.status_code == 200, drafted.text
    ratio = drafted.json()["tpot_s"]["mean"] / plain["tpot_s"]["mean"]
    assert 0.38 < ratio < 0.47
    assert drafted.json()["ttft_s"]["mean"] == pytest.approx(plain["ttft_s"]["mean"], rel=1e-6)


@pytest.mark.parametrize(
    ("speculative", "field", "says"),
    [
        ({"draft_tokens": 3, "accepted_tokens": 3.5}, "body.engine.speculative", "between 0 and draft_tokens (3)"),
        ({"draft_tokens": 0, "accepted_tokens": 0}, "body.engine.speculative.draft_tokens", "greater than or equal"),
        ({"draft_tokens": 2}, "body.engine.speculative.accepted_tokens", "required"),
        ({"draft_tokens": 2, "accepted_tokens": 1, "method": "medusa"}, "body.engine.speculative.method", "mtp"),
    ],
)
def test_bad_speculative_options_name_the_field(
    client: TestClient, speculative: dict[str, Any], field: str, says: str
) -> None:
    response = client.post(PATH, json={**BASE, "engine": {"speculative": speculative}})
    assert rejected(response) == [field]
    assert says in response.text
