"""Request traces over HTTP, on SQLite and PostgreSQL: uploaded as JSON, CSV and JSON Lines in the published formats,
stored once, read back as they were sent (arrivals from the first request), replayed by serving estimates exactly as
the same requests sent in the body, and bad files answered with a 4xx that names the request and the line."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.serving import ServingRead
from schemas.traces import TraceRead
from service.examples import TRACE_UPLOAD_EXAMPLES
from tests.conftest import bearer, make_key

PATH = "/v1/traces"
SERVING = "/v1/estimate/serving"
CHAT: dict[str, Any] = TRACE_UPLOAD_EXAMPLES["application/json"]["chat-burst"]["value"]
SERVE: dict[str, Any] = {"model": "llama-3-8b", "hardware": "h100-sxm"}


@pytest.fixture(autouse=True)
def _upload_key(client: TestClient) -> None:
    """Every request of these tests carries an upload key: storing and deleting a trace needs one (the rules of who
    may are tests/service/test_write_access.py's)."""
    client.headers.update(bearer(make_key(client, "upload")))


def upload(client: TestClient, content: str | bytes, media: str, **params: str) -> Any:
    return client.post(PATH, content=content, headers={"content-type": media}, params=params)


def fields(response: Any, status: int = 422) -> list[str]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "message", "detail"}
    return [d["field"] for d in body["detail"]]


@pytest.mark.databases  # storage
def test_a_json_trace_is_stored_and_summarised(client: TestClient) -> None:
    r = client.post(PATH, json=CHAT)
    assert r.status_code == 201, r.text
    doc = TraceRead.model_validate(r.json()).model_dump()
    assert doc["id"].startswith("tr_") and len(doc["id"]) == 27
    assert (doc["name"], doc["format"], doc["requests"]) == ("chat-burst", "json", 4)
    # By hand from the example: arrivals 0 … 0.48 s (3 gaps), prompts 812, 2048, 377, 1530; outputs 164, 256, 91, 402.
    assert doc["duration_s"] == pytest.approx(0.48)
    assert doc["rate_per_s"] == pytest.approx(3 / 0.48)
    assert doc["prompt_tokens"] == {"mean": 1191.75, "p50": 1171.0, "p90": pytest.approx(1892.6), "max": 2048}
    assert doc["output_tokens"]["mean"] == 228.25 and doc["output_tokens"]["max"] == 402
    got = client.get(f"{PATH}/{doc['id']}")
    assert got.status_code == 200 and got.json() == r.json()


@pytest.mark.databases  # storage
def test_the_same_requests_are_stored_once(client: TestClient) -> None:
    first = client.post(PATH, json=CHAT)
    assert first.status_code == 201
    again = client.post(PATH, json={**CHAT, "name": "another name"})
    assert again.status_code == 200, again.text  # already there: the stored trace, with its first name
    assert again.json() == first.json()
    # The same requests as a CSV file are the same trace too: the id is the requests' digest.
    rows = "".join(f"{r['arrival_s']},{r['prompt_tokens']},{r['output_tokens']}\n" for r in CHAT["requests"])
    as_csv = upload(client, "arrival_s,prompt_tokens,output_tokens\n" + rows, "text/csv")
    assert as_csv.status_code == 200 and as_csv.json()["id"] == first.json()["id"]
    listed = client.get(PATH).json()
    assert listed["total"] == 1 and [t["id"] for t in listed["items"]] == [first.json()["id"]]


def test_a_csv_trace_is_replayed_from_its_first_arrival(client: TestClient) -> None:
    csv = "Arrival_S, Prompt_Tokens, Output_Tokens\n1000.0,100,10\n\n1000.5,200,20\n1002.25,300.0,30\n"
    r = upload(client, csv, "text/csv; charset=utf-8", name="absolute clock")
    assert r.status_code == 201, r.text
    assert (r.json()["name"], r.json()["format"], r.json()["duration_s"]) == ("absolute clock", "csv", 2.25)
    page = client.get(f"{PATH}/{r.json()['id']}/requests", params={"limit": 2, "offset": 1}).json()
    assert page["total"] == 3 and (page["limit"], page["offset"]) == (2, 1)
    assert page["items"] == [
        {"arrival_s": 0.5, "prompt_tokens": 200, "output_tokens": 20},
        {"arrival_s": 2.25, "prompt_tokens": 300, "output_tokens": 30},
    ]


def test_an_azure_trace_reads_its_timestamps(client: TestClient) -> None:
    csv = TRACE_UPLOAD_EXAMPLES["text/csv"]["azure"]["value"]
    r = upload(client, csv, "text/csv")
    assert r.status_code == 201, r.text
    doc = r.json()
    assert doc["format"] == "azure" and doc["requests"] == 3
    # 18:15:46.6805900 → 18:15:51.4405330 (the seventh fractional digit is below a microsecond): 4.759943 s.
    assert doc["duration_s"] == pytest.approx(4.759943, abs=1e-6)
    items = client.get(f"{PATH}/{doc['id']}/requests").json()["items"]
    assert [i["arrival_s"] for i in items] == pytest.approx([0.0, 4.314579, 4.759943], abs=1e-6)
    assert [(i["prompt_tokens"], i["output_tokens"]) for i in items] == [(374, 44), (396, 109), (879, 31)]


def test_a_burstgpt_trace_and_its_failed_requests(client: TestClient) -> None:
    head = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    ok = head + "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,251,1338,Conversation log\n"
    r = upload(client, ok, "text/csv")
    assert r.status_code == 201, r.text
    assert (r.json()["format"], r.json()["duration_s"], r.json()["prompt_tokens"]["max"]) == ("burstgpt", 40.0, 1087)
    failed = head + "5,ChatGPT,472,18,490,Conversation log\n7,GPT-4,933,0,933,Conversation log\n"
    bad = upload(client, failed, "text/csv")
    assert fields(bad) == ["body.requests.1.output_tokens"]
    assert "line 3" in bad.json()["message"] and "BurstGPT writes 0" in bad.json()["message"]


def test_a_mooncake_trace_counts_milliseconds(client: TestClient) -> None:
    lines = TRACE_UPLOAD_EXAMPLES["application/x-ndjson"]["mooncake"]["value"]
    r = upload(client, lines, "application/x-ndjson")
    assert r.status_code == 201, r.text
    assert (r.json()["format"], r.json()["duration_s"]) == ("mooncake", 3.052)
    assert r.json()["prompt_tokens"]["max"] == 6955


@pytest.mark.parametrize(
    ("content", "media", "field", "words"),
    [
        ("arrival_s,prompt_tokens,output_tokens\n0,10,5\n2,10,5\n1,10,5\n", "text/csv",
         "body.requests.2.arrival_s", "line 4: arrivals must not go backwards"),
        ("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,ten,5\n", "text/csv",
         "body.requests.1.prompt_tokens", "line 3: prompt_tokens 'ten' is not a number"),
        ("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10.5,5\n", "text/csv",
         "body.requests.1.prompt_tokens", "is not a number"),
        ("arrival_s,prompt_tokens,output_tokens\nnan,10,5\n", "text/csv", "body.requests.0.arrival_s", "not a number"),
        ("arrival_s,prompt_tokens,output_tokens\n0,3000000,5\n", "text/csv",
         "body.requests.0.prompt_tokens", "1 … 2,097,152"),
        ("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1000001,10,5\n", "text/csv",
         "body.requests.1.arrival_s", "at most 1000000 s"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,5\n", "text/csv",
         "body.requests.0.arrival_s", "is not a date and time"),
        ("time,in,out\n0,10,5\n", "text/csv", "body", "none of the recognised column sets"),
        ("arrival_s,prompt_tokens,output_tokens\n0,10\n", "text/csv", "body", "line 2: 2 values"),
        ("", "text/csv", "body", "empty file"),
        ("arrival_s,prompt_tokens,output_tokens\n", "text/csv", "body", "at least one request"),
        ('{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": 1, "input_length": 3}\n',
         "application/x-ndjson", "body.requests.1.output_tokens", "line 2: no 'output_length'"),
        ('{"timestamp": 0, "input_length": 10, "output_length": 5}\n[1, 2]\n', "application/x-ndjson", "body",
         "line 2: not a JSON object"),
        ('{"t": 0}\n', "application/x-ndjson", "body", "none of the recognised sets"),
        ('{"timestamp": true, "input_length": 10, "output_length": 5}\n', "application/x-ndjson",
         "body.requests.0.arrival_s", "is not a number"),
        (b"arrival_s,prompt_tokens,output_tokens\n0,10,\xff\n", "text/csv", "body", "UTF-8"),
        ('{"requests": [{"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 5}, {"arrival_s": 0.5, '
         '"prompt_tokens": 5, "output_tokens": 5}]}', "application/json", "body.requests.1.arrival_s", "backwards"),
        ('{"requests": []}', "application/json", "body.requests", "at least 1"),
        ('{"requests": [{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5, "priority": 1}]}',
         "application/json", "body.requests.0.priority", "Extra inputs"),
        ("{not json", "application/json", "body", "not JSON"),
    ],
)  # fmt: skip
def test_a_bad_trace_is_a_422_naming_the_request(
    client: TestClient, content: str | bytes, media: str, field: str, words: str
) -> None:
    r = upload(client, content, media)
    assert fields(r) == [field]
    assert words in r.json()["detail"][0]["message"], r.json()
    assert client.get(PATH).json()["total"] == 0  # nothing stored


def test_a_trace_of_more_than_the_limit_is_refused(client: TestClient) -> None:
    rows = "".join(f"{i},10,5\n" for i in range(100_001))
    r = upload(client, "arrival_s,prompt_tokens,output_tokens\n" + rows, "text/csv")
    assert fields(r) == ["body"] and "at most 100,000" in r.json()["message"]


def test_other_media_types_are_a_415(client: TestClient) -> None:
    r = upload(client, "0,10,5\n", "text/plain")
    assert r.status_code == 415, r.text
    assert r.json()["error"] == "unsupported_media_type" and "text/csv" in r.json()["message"]
    assert client.post(PATH, content=b"x").status_code == 415  # no content type at all


@pytest.mark.databases  # storage
def test_a_stored_trace_replays_as_the_same_requests_in_the_body(client: TestClient) -> None:
    trace = [
        {"arrival_s": 0.05 * i, "prompt_tokens": 200 + 37 * (i % 9), "output_tokens": 20 + 11 * (i % 5)}
        for i in range(120)
    ]
    stored = client.post(PATH, json={"name": "replay", "requests": trace})
    assert stored.status_code == 201, stored.text
    inline = client.post(SERVING, json={**SERVE, "load": {"trace": trace}})
    by_id = client.post(SERVING, json={**SERVE, "load": {"trace_id": stored.json()["id"]}})
    assert inline.status_code == 200 and by_id.status_code == 200, by_id.text
    ServingRead.model_validate(by_id.json())
    assert by_id.json() == inline.json()
    assert by_id.json()["requests"] == 120


def test_serving_names_a_missing_or_malformed_trace(client: TestClient) -> None:
    missing = client.post(SERVING, json={**SERVE, "load": {"trace_id": "tr_" + "0" * 24}})
    assert fields(missing, 404) == ["body.load.trace_id"]
    assert "POST /v1/traces" in missing.json()["message"]
    assert fields(client.post(SERVING, json={**SERVE, "load": {"trace_id": "trace-1"}})) == ["body.load.trace_id"]
    both = {"trace_id": "tr_" + "0" * 24, "trace": [{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5}]}
    assert fields(client.post(SERVING, json={**SERVE, "load": both})) == ["body.load"]


def test_a_stored_trace_longer_than_the_models_context_is_refused_by_serving(client: TestClient) -> None:
    # llama-3-8b's context is 8 192 tokens: 8 000 + 500 do not fit; the trace itself is a valid trace.
    stored = client.post(PATH, json={"requests": [{"arrival_s": 0, "prompt_tokens": 8000, "output_tokens": 500}]})
    assert stored.status_code == 201
    r = client.post(SERVING, json={**SERVE, "load": {"trace_id": stored.json()["id"]}})
    assert fields(r) == ["body.load.trace_id"] and "8500 tokens" in r.json()["message"]


@pytest.mark.databases  # storage
def test_a_deleted_trace_is_gone(client: TestClient) -> None:
    trace_id = client.post(PATH, json=CHAT).json()["id"]
    assert client.delete(f"{PATH}/{trace_id}").status_code == 204
    assert fields(client.get(f"{PATH}/{trace_id}"), 404) == []
    assert client.get(f"{PATH}/{trace_id}/requests").status_code == 404
    assert client.delete(f"{PATH}/{trace_id}").status_code == 404
    assert fields(client.get(f"{PATH}/not-a-trace")) == ["path.trace_id"]


@pytest.mark.databases  # storage
def test_every_upload_example_is_stored(client: TestClient) -> None:
    for media, examples in TRACE_UPLOAD_EXAMPLES.items():
        for name, example in examples.items():
            value = example["value"]
            r = client.post(PATH, json=value) if media == "application/json" else upload(client, value, media)
            assert r.status_code == 201, (media, name, r.text)
            TraceRead.model_validate(r.json())


@pytest.mark.databases  # storage
def test_racing_uploads_of_one_trace_store_it_once(client: TestClient) -> None:
    # Eight clients send the same file at once: the digest is the key, so one insert wins (201) and the others find
    # its row (200); nothing is stored twice and nobody gets an error.
    rows = "".join(f"{0.01 * i:.2f},{100 + i},{10 + i % 7}\n" for i in range(2000))
    body = "arrival_s,prompt_tokens,output_tokens\n" + rows
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: upload(client, body, "text/csv"), range(8)))
    assert sorted(a.status_code for a in answers) == [200] * 7 + [201], [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert client.get(PATH).json()["total"] == 1


PLAN: dict[str, Any] = {
    "model": "llama-3-8b",
    "hardware": ["a100-sxm-80gb", "h100-sxm"],
    "objectives": {"ttft_s": 0.5, "tpot_s": 0.03},
    "search": {"tensor": [1, 2], "max_num_seqs": [16, 64], "max_num_batched_tokens": [4096]},
    "prices": {"a100-sxm-80gb": 1.5, "h100-sxm": 3.0},
    "max_results": 4,
}


def stored(client: TestClient, requests: list[dict[str, Any]]) -> str:
    r = client.post(PATH, json={"requests": requests})
    assert r.status_code == 201, r.text
    trace_id: str = r.json()["id"]
    return trace_id


def test_a_plan_for_a_trace_of_one_shape_is_the_plan_for_that_shape(client: TestClient) -> None:
    # Every request 1 024 / 128 tokens: whatever pairs are drawn from the trace, they are the fixed lengths'.
    trace_id = stored(
        client, [{"arrival_s": 0.05 * i, "prompt_tokens": 1024, "output_tokens": 128} for i in range(400)]
    )
    fixed = {**PLAN, "traffic": {"requests_per_s": 10, "prompt_tokens": 1024, "output_tokens": 128}}
    by_trace = {**PLAN, "traffic": {"requests_per_s": 10, "trace_id": trace_id}}
    a, b = client.post("/v1/plan", json=fixed), client.post("/v1/plan", json=by_trace)
    assert a.status_code == 200 and b.status_code == 200, b.text
    assert b.json() == a.json()


def test_a_plan_for_a_trace_serves_its_own_rate(client: TestClient) -> None:
    requests = [
        {
            "arrival_s": 0.1 * i + 0.02 * (i % 3),
            "prompt_tokens": 300 + 97 * (i % 11),
            "output_tokens": 40 + 13 * (i % 7),
        }
        for i in range(301)
    ]
    trace_id = stored(client, requests)
    rate = client.get(f"{PATH}/{trace_id}").json()["rate_per_s"]
    assert rate == pytest.approx(300 / 30.0)  # 300 gaps over 0.1 × 300 s (the last arrival's offset is 0)
    r = client.post("/v1/plan", json={**PLAN, "traffic": {"trace_id": trace_id}})
    assert r.status_code == 200, r.text
    assert r.json()["demand_requests_per_s"] == pytest.approx(rate)
    assert r.json()["feasible"] or r.json()["closest"]


def test_a_plan_names_what_is_wrong_with_its_trace(client: TestClient) -> None:
    ok = stored(client, [{"arrival_s": float(i), "prompt_tokens": 100, "output_tokens": 10} for i in range(3)])
    at_once = stored(client, [{"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 10}] * 3)
    too_long = stored(client, [{"arrival_s": 0.0, "prompt_tokens": 8000, "output_tokens": 500}])

    def post(traffic: dict[str, Any], status: int = 422) -> list[str]:
        return fields(client.post("/v1/plan", json={**PLAN, "traffic": traffic}), status)

    assert post({"trace_id": ok, "prompt_tokens": 100}) == ["body.traffic"]
    assert post({"trace_id": ok, "requests_per_s": 1, "output_tokens_per_s": 5}) == ["body.traffic"]
    assert post({"requests_per_s": 1, "prompt_tokens": 100}) == ["body.traffic"]
    assert post({"trace_id": "tr_" + "1" * 24}, 404) == ["body.traffic.trace_id"]
    assert post({"trace_id": at_once}) == ["body.traffic.trace_id"]
    assert post({"trace_id": too_long}) == ["body.traffic.trace_id"]


def test_a_plan_checks_its_size_again_on_the_traces_prompts(client: TestClient) -> None:
    # 4 profiles × 4 tensor widths × (2 × 1024 + 64) requests × (⌈p / 256⌉ + 2) iterations: 101 376 with the
    # 1-token bound the request's validation has for a trace, 1 148 928 once the trace's 8 000-token prompt is read
    # (⌈8 000 / 256⌉ + 2 = 34): over the 1 000 000 allowed, a 422 naming body.search before anything is simulated.
    trace_id = stored(client, [{"arrival_s": 0.0, "prompt_tokens": 8000, "output_tokens": 100},
                               {"arrival_s": 1.0, "prompt_tokens": 100, "output_tokens": 100}])  # fmt: skip
    body = {
        **PLAN,
        "hardware": ["a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200"],
        "search": {"tensor": [1, 2, 4, 8], "max_num_seqs": [1024], "max_num_batched_tokens": [256]},
        "traffic": {"trace_id": trace_id},
        "prices": {},
    }
    r = client.post("/v1/plan", json=body)
    assert fields(r) == ["body.search"] and "1148928 iterations" in r.json()["message"]
