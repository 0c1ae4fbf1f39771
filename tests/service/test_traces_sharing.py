"""Traces that carry sharing (issue 41): Mooncake's hash_ids and Ridgeline's prefix_hashes, session and turn are
stored with the trace, read back, and replayed with prefix caching; bad sharing columns are a 422 naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import bearer, make_key

PATH = "/v1/traces"
SERVING = "/v1/estimate/serving"
SERVE: dict[str, Any] = {"model": "llama-3-8b", "hardware": "h100-sxm"}


@pytest.fixture(autouse=True)
def _upload_key(client: TestClient) -> None:
    client.headers.update(bearer(make_key(client, "upload")))


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def upload(client: TestClient, content: str, media: str = "application/x-ndjson") -> Any:
    return client.post(PATH, content=content, headers={"content-type": media})


def fields(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    return [d["field"] for d in response.json()["detail"]]


@pytest.mark.databases  # storage
def test_mooncake_hash_ids_are_kept_and_replayed(client: TestClient) -> None:
    # Four requests of 1 100 tokens (3 hash blocks of 512: two full, one partial), one every 10 s. Requests 2-4
    # share the first two blocks [7, 8] with request 1: each finds 2 × 512 = 1 024 tokens cached (the partial
    # third block is never reused) and computes 76; request 3's own third id does not matter.
    rows = [{"timestamp": 10_000 * i, "input_length": 1100, "output_length": 20, "hash_ids": [7, 8, 100 + i]}
            for i in range(4)]  # fmt: skip
    r = upload(client, jsonl(rows))
    assert r.status_code == 201, r.text
    trace_id = r.json()["id"]
    back = client.get(f"{PATH}/{trace_id}/requests").json()["items"]
    assert [x["prefix_hashes"] for x in back] == [[7, 8, 100 + i] for i in range(4)]
    doc = client.post(SERVING, json={**SERVE, "load": {"trace_id": trace_id}}).json()
    total = doc["prefix_cache"]["total"]
    assert (total["prompt_tokens"], total["prefilled_tokens"]) == (4400, 1100 + 3 * 76)
    assert (total["lookup_blocks"], total["hit_blocks"]) == (8, 6)
    assert doc["prefix_cache"]["block_tokens"] == 512
    # the same lengths without hashes are another trace, replayed without a cache
    plain = upload(client, jsonl([{k: v for k, v in row.items() if k != "hash_ids"} for row in rows]))
    assert plain.json()["id"] != trace_id
    assert client.post(SERVING, json={**SERVE, "load": {"trace_id": plain.json()["id"]}}).json()["prefix_cache"] is None


def test_a_json_trace_with_sessions_reuses_each_turns_history(client: TestClient) -> None:
    # A session of two turns in blocks of 32 (the engine's): turn 1 a prompt of 100 and an answer of 60 (5 full
    # blocks of its 160 tokens); turn 2 a prompt of 200, whose first 160 tokens are turn 1's: 5 blocks, 160 tokens,
    # cached; turn 2 is sent when turn 1 ends, not at its recorded arrival 0.
    trace = [
        {"arrival_s": 0, "prompt_tokens": 100, "output_tokens": 60, "session": 1, "turn": 0},
        {"arrival_s": 0, "prompt_tokens": 200, "output_tokens": 10, "session": 1, "turn": 1},
    ]
    doc = client.post(SERVING, json={**SERVE, "load": {"trace": trace}}).json()
    total = doc["prefix_cache"]["total"]
    assert (total["prompt_tokens"], total["prefilled_tokens"]) == (300, 100 + 40)
    assert doc["queue_s"]["p99"] < 0.1  # the second waited for the first's answer, not in the engine's queue


@pytest.mark.parametrize(
    ("rows", "field"),
    [
        (
            [{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3]}],
            "body.requests.0.prefix_hashes",
        ),  # ⌈600 / 512⌉ = 2
        (
            [{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, -2]}],
            "body.requests.0.prefix_hashes",
        ),
        (
            [{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": "1,2"}],
            "body.requests.0.prefix_hashes",
        ),
        (
            [
                {"arrival_s": 0, "prompt_tokens": 6, "output_tokens": 5, "session": 3, "turn": 2},
                {"arrival_s": 1, "prompt_tokens": 6, "output_tokens": 5, "session": 3, "turn": 1},
            ],
            "body.requests.1.turn",
        ),
        ([{"arrival_s": 0, "prompt_tokens": 6, "output_tokens": 5, "turn": 2}], "body.requests.0.session"),
        ([{"arrival_s": 0, "prompt_tokens": 6, "output_tokens": 5, "session": -1}], "body.requests.0.session"),
    ],
)
def test_bad_sharing_columns_are_a_422(client: TestClient, rows: list[dict[str, Any]], field: str) -> None:
    assert fields(upload(client, jsonl(rows))) == [field]


def test_a_json_document_checks_its_hashes_against_its_block(client: TestClient) -> None:
    doc = {"hash_block_tokens": 16, "requests": [{"arrival_s": 0, "prompt_tokens": 33, "output_tokens": 2,
                                                  "prefix_hashes": [1, 2, 3, 4]}]}  # fmt: skip
    assert fields(client.post(PATH, json=doc)) == ["body.requests.0.prefix_hashes"]  # ⌈33 / 16⌉ = 3
    doc["requests"][0]["prefix_hashes"] = [1, 2, 3]
    assert client.post(PATH, json=doc).status_code == 201


def test_a_csv_trace_takes_sessions(client: TestClient) -> None:
    csv = "arrival_s,prompt_tokens,output_tokens,session,turn\n0,100,60,4,0\n0,200,10,4,1\n"
    r = upload(client, csv, "text/csv")
    assert r.status_code == 201, r.text
    back = client.get(f"{PATH}/{r.json()['id']}/requests").json()["items"]
    assert [(x["session"], x["turn"]) for x in back] == [(4, 0), (4, 1)]


@pytest.mark.databases  # storage
def test_a_traces_lora_adapters_are_kept_and_replayed(client: TestClient) -> None:
    # A CSV trace naming adapters 3, 5, 3 and none: stored, read back (none: the key left out), and replayed with
    # the adapters (two of them, each loaded once with max_loras 2); the same lengths without the column are another
    # trace, run without LoRA.
    csv = "arrival_s,prompt_tokens,output_tokens,adapter\n0,100,6,3\n0,100,6,5\n0,100,6,3\n0,100,6,\n"
    r = upload(client, csv, "text/csv")
    assert r.status_code == 201, r.text
    back = client.get(f"{PATH}/{r.json()['id']}/requests").json()["items"]
    assert [x.get("adapter") for x in back] == [3, 5, 3, None]
    body = {**SERVE, "engine": {"max_loras": 2}, "load": {"trace_id": r.json()["id"]}}
    lora = client.post(SERVING, json=body).json()["lora"]
    assert (lora["adapters"], lora["loads"], lora["rank"]) == (2, 2, 16)
    plain = upload(client, "arrival_s,prompt_tokens,output_tokens\n0,100,6\n0,100,6\n0,100,6\n0,100,6\n", "text/csv")
    assert plain.json()["id"] != r.json()["id"]
    assert client.post(SERVING, json={**body, "load": {"trace_id": plain.json()["id"]}}).json()["lora"] is None
    # JSON lines take it too; a bad adapter id names the field
    rows = [{"arrival_s": 0, "prompt_tokens": 6, "output_tokens": 5, "adapter": "x"}]
    assert fields(upload(client, jsonl(rows))) == ["body.requests.0.adapter"]
    rows[0]["adapter"] = 11
    r = upload(client, jsonl(rows))
    assert client.get(f"{PATH}/{r.json()['id']}/requests").json()["items"][0]["adapter"] == 11
