"""The emulated engine's OpenAI-compatible API in process (the real load-testing tools against `ridgeline emulate`
are tests/emulate/test_load_tools.py): streamed and whole answers of `max_tokens` tokens, and its refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.emulate.app import create_emulator
from service.emulate.build import DeploymentError, emulated


@pytest.fixture(scope="module")
def emulator() -> Iterator[TestClient]:
    app = create_emulator(emulated({"model": "llama-3-8b", "hardware": "h100-sxm"}, 1024, 16))
    with TestClient(app) as client:
        yield client


def _events(text: str) -> list[str]:
    return [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]


def test_models_lists_the_deployment(emulator: TestClient) -> None:
    data = emulator.get("/v1/models").json()["data"]
    assert [m["id"] for m in data] == ["llama-3-8b"]
    assert data[0]["deployment"]["hardware"] == "h100-sxm"


@pytest.mark.parametrize("chat", [False, True])
def test_a_streamed_answer_has_max_tokens_tokens_and_its_usage(emulator: TestClient, chat: bool) -> None:
    # 5 prompt words, 7 tokens asked: 7 words "tok" over the chunks, then the finish chunk, the usage, [DONE].
    body: dict[str, object] = {"model": "llama-3-8b", "max_tokens": 7, "stream": True,
                               "stream_options": {"include_usage": True}}  # fmt: skip
    if chat:
        body["messages"] = [{"role": "user", "content": "one two three four five"}]
    else:
        body["prompt"] = "one two three four five"
    r = emulator.post("/v1/chat/completions" if chat else "/v1/completions", json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    docs = [json.loads(e) for e in events[:-1]]
    text = "".join((c["delta"].get("content", "") if chat else c["text"]) for d in docs for c in d["choices"])
    assert text.split() == ["tok"] * 7
    assert docs[-2]["choices"][0]["finish_reason"] == "length"
    assert docs[-1]["usage"] == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}


def test_a_whole_answer_waits_for_its_last_token(emulator: TestClient) -> None:
    # No max_tokens: the emulator's default of 16 (set above).
    r = emulator.post("/v1/completions", json={"model": "llama-3-8b", "prompt": "a b c"})
    assert r.status_code == 200
    doc = r.json()
    assert doc["choices"][0]["text"].split() == ["tok"] * 16
    assert doc["usage"]["completion_tokens"] == 16


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "prompt"),
        ({"model": "m", "prompt": "a", "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "prompt": "a", "max_tokens": 2000}, "max_tokens"),  # past the 1 024 tokens it serves
    ],
)
def test_bad_requests_are_400_naming_the_parameter(emulator: TestClient, body: dict[str, object], param: str) -> None:
    r = emulator.post("/v1/completions", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == param


def test_a_deployment_that_does_not_fit_is_refused_before_serving() -> None:
    # llama-3-70b's 141 GB of bf16 weights on one 80 GB H100
    with pytest.raises(DeploymentError, match="memory_fraction"):
        emulated({"model": "llama-3-70b", "hardware": "h100-sxm"}, 1024, 16)
    with pytest.raises(DeploymentError, match="mode"):
        emulated({"model": "llama-3-8b", "hardware": "h100-sxm", "mode": "disaggregated",
                  "prefill": {}, "decode": {}}, 1024, 16)  # fmt: skip
