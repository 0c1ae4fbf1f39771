"""Inputs a hostile but ordinary client sends (issue 40 §3): each is a 4xx envelope naming the field at fault, never a
500. Nesting past the limit (the merge patch, the json module and pydantic's serialiser recurse once per level), a
layout that is not whole nodes, traffic whose fleet overflows 64 bits and NUL characters (which PostgreSQL cannot
store or filter on) run on both databases; the rest on SQLite.

Every body is written by hand; each test says what it crosses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas import limits
from tests.conftest import bearer, make_key

LENGTHS = {"prompt_tokens": {"kind": "fixed", "value": 512}, "output_tokens": {"kind": "fixed", "value": 64}}
SERVING = {"model": "llama-3-8b", "hardware": "h100-sxm", "load": {"concurrency": 8, "requests": 64, **LENGTHS}}
INFERENCE = {
    "model": "llama-3-8b",
    "hardware": "h100-sxm",
    "workload": {"batch": 8, "prompt_tokens": 512, "output_tokens": 64},
}
TRAINING = {"model": "llama-3-8b", "hardware": "h100-sxm", "sequence": 2048, "micro_batch": 1, "global_batch": 8}
MATMUL = {"kind": "matmul", "m": 1024, "n": 1024, "k": 1024}
PLAN = {"model": "llama-3-8b", "hardware": ["h100-sxm"], "search": {"tensor": [1], "max_num_seqs": [8]}}
TRACE = [{"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 10}]


def error(response: Any, status: int, field: str, kind: str | None = None) -> dict[str, Any]:
    """The status, the envelope, and the detail entry naming `field` (of type `kind` when given)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "message", "detail"}
    named = [d for d in body["detail"] if d["field"] == field]
    assert named, f"{field} not in {[d['field'] for d in body['detail']]}"
    if kind is not None:
        assert named[0]["type"] == kind, named[0]
    return named[0]  # type: ignore[no-any-return]


def nested(levels: int) -> str:
    """JSON text of `levels` objects, each the only value of the one before: {"a": {"a": … {} …}}."""
    return '{"a": ' * (levels - 1) + "{}" + "}" * (levels - 1)


def post_text(client: TestClient, path: str, text: str, method: str = "POST") -> Any:
    return client.request(method, path, content=text.encode(), headers={"content-type": "application/json"})


# --- nesting -------------------------------------------------------------------------------------------------------

# Where the probe found a RecursionError: the merge patch of an estimate's hardware_patch, on every estimate that
# takes one.
PATCHED = [
    ("/v1/estimate/op", '{"hardware": "h100-sxm", "op": {"kind": "matmul", "m": 64, "n": 64, "k": 64}, '),
    ("/v1/estimate/ops", '{"hardware": "h100-sxm", "ops": [{"kind": "matmul", "m": 64, "n": 64, "k": 64}], '),
    ("/v1/estimate/serving", '{"model": "llama-3-8b", "hardware": "h100-sxm", "load": {"concurrency": 1, '
     '"requests": 1, "prompt_tokens": {"kind": "fixed", "value": 8}, '
     '"output_tokens": {"kind": "fixed", "value": 8}}, '),
    ("/v1/estimate/training", '{"model": "llama-3-8b", "hardware": "h100-sxm", "sequence": 2048, "micro_batch": 1, '
     '"global_batch": 8, '),
]  # fmt: skip


@pytest.mark.databases
@pytest.mark.parametrize(("path", "head"), PATCHED)
@pytest.mark.parametrize(
    ("levels", "field"), [(963, "body.hardware_patch"), (1023, "body.hardware_patch"), (1100, "body")]
)
def test_a_hardware_patch_nested_a_thousand_deep_is_refused(
    client: TestClient, path: str, head: str, levels: int, field: str
) -> None:
    # 963-1 023 levels: orjson parses them (its limit is 1 024) and the merge patch ran out of stack. 1 100: orjson
    # refuses, and the json module it falls back to ran out of stack instead; no document was built to say which
    # field nests, so the body is named.
    response = post_text(client, path, head + '"hardware_patch": ' + nested(levels) + "}")
    detail = error(response, 422, field, "too_deep")
    assert detail["message"] == "nested more than 32 levels deep: no request needs that many"


@pytest.mark.databases
@pytest.mark.parametrize(("path", "top"), [("/v1/hardware/h100-sxm", "memory"), ("/v1/models/llama-3-8b", "moe")])
def test_a_merge_patch_nested_a_thousand_deep_is_refused(client: TestClient, path: str, top: str) -> None:
    # Refused as the body is parsed, before the entry is read: the same whether the entry may be changed or not.
    response = post_text(client, path, f'{{"{top}": {nested(1000)}}}', method="PATCH")
    error(response, 422, f"body.{top}", "too_deep")


@pytest.mark.databases
def test_the_depth_limit_is_32_levels(client: TestClient) -> None:
    assert limits.MAX_JSON_DEPTH == 32
    head = PATCHED[0][1]
    # The body is level 1 and hardware_patch's object level 2: 31 levels of patch nest the body 32 deep, which
    # passes the depth check and is refused by the profile's schema (no field `a`); 32 levels are one too many.
    at_limit = post_text(client, "/v1/estimate/op", head + '"hardware_patch": ' + nested(31) + "}")
    assert at_limit.status_code == 422
    assert [d["type"] for d in at_limit.json()["detail"]] != ["too_deep"]
    assert at_limit.json()["detail"][0]["field"].startswith("body.hardware_patch.a")
    past = post_text(client, "/v1/estimate/op", head + '"hardware_patch": ' + nested(32) + "}")
    error(past, 422, "body.hardware_patch", "too_deep")


@pytest.mark.databases
@pytest.mark.parametrize("levels", [40, 1000, 3000])
def test_a_json_lines_trace_line_nested_deep_is_refused(client: TestClient, levels: int) -> None:
    client.headers.update(bearer(make_key(client, "upload")))  # storing a trace needs an upload key
    line = '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": ' + "[" * levels + "]" * levels + "}"
    good = '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}'
    response = client.post("/v1/traces", content=f"{good}\n{line}\n", headers={"content-type": "application/x-ndjson"})
    detail = error(response, 422, "body", "too_deep")
    assert detail["message"].startswith("line 2: ")
    assert detail["message"].endswith("nested more than 32 levels deep: no request needs that many")


@pytest.mark.databases
def test_a_json_trace_document_nested_deep_is_refused(client: TestClient) -> None:
    client.headers.update(bearer(make_key(client, "upload")))  # storing a trace needs an upload key
    text = '{"name": "deep", "requests": [{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1, "x": '
    response = post_text(client, "/v1/traces", text + nested(500) + "}]}")
    error(response, 422, "body.requests", "too_deep")


# --- layouts that are not whole nodes ------------------------------------------------------------------------------


@pytest.mark.databases
@pytest.mark.parametrize("pipeline", [3, 5, 7])
def test_a_serving_layout_that_is_not_whole_nodes_is_refused_as_inference_refuses_it(
    client: TestClient, pipeline: int
) -> None:
    # Tensor 4 × pipeline p on H100 SXM (8 GPUs to an NVLink domain): 12, 20 or 28 devices, not whole nodes of 8.
    parallelism = {"tensor": 4, "pipeline": pipeline}
    inference = client.post("/v1/estimate/inference", json={**INFERENCE, "parallelism": parallelism})
    expected = error(inference, 422, "body.parallelism.pipeline")
    assert "whole nodes" in expected["message"], expected
    serving = client.post("/v1/estimate/serving", json={**SERVING, "parallelism": parallelism})
    assert error(serving, 422, "body.parallelism.pipeline")["message"] == expected["message"]
    # A disaggregated pool's layout names that pool.
    pools = {"mode": "disaggregated", "prefill": {"parallelism": parallelism}, "decode": {}}
    disaggregated = client.post("/v1/estimate/serving", json={**SERVING, **pools})
    assert error(disaggregated, 422, "body.prefill.parallelism.pipeline")["message"] == expected["message"]


# --- traffic whose fleet overflows 64 bits -------------------------------------------------------------------------


@pytest.mark.databases
@pytest.mark.parametrize(
    "rate",
    [{"requests_per_s": 1e20}, {"output_tokens_per_s": 1e24}],
)
def test_a_plan_for_traffic_past_64_bits_of_devices_is_refused(client: TestClient, rate: dict[str, float]) -> None:
    # 10²⁰ requests/s, or 10²⁴ output tokens/s over 64-token outputs (1.6 × 10²² requests/s): one H100 serves at most
    # thousands a second, so the fleet is ~10¹⁷ devices or more, past 2⁶³ as a count and far past 2²⁰.
    traffic = {**rate, "prompt_tokens": 512, "output_tokens": 64}
    response = client.post("/v1/plan", json={**PLAN, "traffic": traffic})
    detail = error(response, 422, "body.traffic")
    assert "more than 1048576 devices" in detail["message"]


# --- NUL characters ------------------------------------------------------------------------------------------------


@pytest.mark.databases
@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/v1/hardware/resolve", {"device": "A\x00B"}, "query.device"),
        ("/v1/models", {"family": "\x00"}, "query.family"),
        ("/v1/hardware", {"vendor": "nvidia\x00"}, "query.vendor"),
        ("/v1/benchmarks", {"hardware": "h100\x00sxm"}, "query.hardware"),
    ],
)
def test_a_nul_in_a_query_parameter_is_refused(
    client: TestClient, path: str, params: dict[str, str], field: str
) -> None:
    detail = error(client.get(path, params=params), 422, field, "nul_character")
    assert detail["message"] == "holds a NUL character (U+0000), which no stored or filtered text may contain"


@pytest.mark.databases
@pytest.mark.parametrize("path", ["/v1/hardware/a%00b", "/v1/models/a%00b", "/v1/roofline/a%00b.svg"])
def test_a_nul_in_a_path_parameter_is_refused(client: TestClient, path: str) -> None:
    name = "hardware" if path.startswith("/v1/roofline") else "slug"
    error(client.get(path), 422, f"path.{name}", "nul_character")


@pytest.mark.databases
def test_a_nul_in_a_body_string_or_key_is_refused(client: TestClient) -> None:
    # Refused as the body is parsed, before the schema or the database sees it.
    created = client.post("/v1/hardware", json={"slug": "nul-test", "name": "H100\x00"})
    error(created, 422, "body.name", "nul_character")
    patched = client.patch("/v1/models/llama-3-8b", json={"notes": ["fine", "not\x00fine"]})
    error(patched, 422, "body.notes.1", "nul_character")
    key = client.post("/v1/estimate/op", json={"hardware": "h100-sxm", "op": MATMUL, "hardware_patch": {"a\x00": 1}})
    error(key, 422, "body.hardware_patch.a\\u0000", "nul_character")
    # An escaped backslash followed by "u0000" is six characters of text, not a NUL.
    text = post_text(client, "/v1/estimate/op", '{"hardware": "h100-sxm\\\\u0000", "op": {"kind": "matmul"}}')
    assert "nul_character" not in text.text


@pytest.mark.databases
def test_a_nul_in_a_trace_is_refused(client: TestClient) -> None:
    client.headers.update(bearer(make_key(client, "upload")))  # storing a trace needs an upload key
    document = client.post("/v1/traces", json={"name": "chat\x00", "requests": TRACE})
    error(document, 422, "body.name", "nul_character")
    csv = "arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,10\x000,10\n"
    as_csv = client.post("/v1/traces", content=csv, headers={"content-type": "text/csv"})
    assert error(as_csv, 422, "body", "nul_character")["message"].startswith("line 3: ")
    named = client.post(
        "/v1/traces", content=csv.replace("\x00", ""), params={"name": "a\x00b"}, headers={"content-type": "text/csv"}
    )
    error(named, 422, "query.name", "nul_character")
    # Nothing was stored.
    assert client.get("/v1/traces").json()["total"] == 0


def test_a_nul_in_a_static_path_is_not_found(client: TestClient) -> None:
    assert client.get("/static/a%00b").status_code == 404


# --- media types ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"}, {}],
)
def test_a_json_endpoint_answers_415_to_another_media_type(client: TestClient, headers: dict[str, str]) -> None:
    body = b'{"hardware": "h100-sxm", "op": {"kind": "matmul", "m": 64, "n": 64, "k": 64}}'
    response = client.post("/v1/estimate/op", content=body, headers=headers)
    detail = error(response, 415, "body", "unsupported_media_type")
    assert response.json()["error"] == "unsupported_media_type"
    assert detail["message"].endswith("this endpoint takes application/json")
    # A JSON media type with parameters, or a +json one, is JSON.
    for media in ("application/json; charset=utf-8", "application/merge-patch+json"):
        assert client.post("/v1/estimate/op", content=body, headers={"content-type": media}).status_code == 200


def test_415_is_declared_where_a_json_body_is_taken(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "415" in paths["/v1/estimate/op"]["post"]["responses"]
    assert "415" in paths["/v1/hardware/{slug}"]["patch"]["responses"]
    assert "415" not in paths["/v1/hardware"]["get"]["responses"]


# --- what an error names -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "field", "listing"),
    [
        ("GET", "/v1/hardware/nope", None, "path.slug", "GET /v1/hardware"),
        ("GET", "/v1/models/nope", None, "path.slug", "GET /v1/models"),
        ("POST", "/v1/estimate/op", {"hardware": "nope", "op": MATMUL}, "body.hardware", "GET /v1/hardware"),
        ("POST", "/v1/estimate/inference", {**INFERENCE, "model": "nope"}, "body.model", "GET /v1/models"),
        ("POST", "/v1/estimate/inference/batch", {"items": [INFERENCE, {**INFERENCE, "hardware": "nope"}]},
         "body.items.1.hardware", "GET /v1/hardware"),
        ("POST", "/v1/estimate/serving", {**SERVING, "model": "nope"}, "body.model", "GET /v1/models"),
        ("POST", "/v1/estimate/training", {**TRAINING, "hardware": "nope"}, "body.hardware", "GET /v1/hardware"),
        ("POST", "/v1/plan", {**PLAN, "hardware": ["h100-sxm", "nope"],
                              "traffic": {"requests_per_s": 1, "prompt_tokens": 64, "output_tokens": 8}},
         "body.hardware.1", "GET /v1/hardware"),
        ("GET", "/v1/hardware/resolve?device=no-such-device", None, "query.device", "GET /v1/hardware"),
    ],
)  # fmt: skip
def test_an_unknown_model_or_profile_names_the_field(
    client: TestClient, method: str, path: str, body: Any, field: str, listing: str
) -> None:
    response = client.request(method, path, json=body)
    detail = error(response, 404, field, "not_found")
    assert listing in detail["message"]
    if field != "query.device":  # a catalogue entry's 404 says the field in its message, as a 422 does
        assert f"({field}); {listing} lists them." in response.json()["message"]


def test_training_on_a_device_without_the_dtype_names_dtypes(client: TestClient) -> None:
    # cpu-generic has no bf16 matrix peak: the request's field is dtypes.compute (its default), not the core's name.
    response = client.post("/v1/estimate/training", json={**TRAINING, "hardware": "cpu-generic"})
    error(response, 422, "body.dtypes.compute")


@pytest.mark.parametrize(
    ("prompt", "output", "field"),
    [
        (512, 8000, "body.load.output_tokens"),
        (8192, 1, "body.load.prompt_tokens"),
        (9000, 10, "body.load.prompt_tokens"),
    ],
)
def test_a_request_past_the_context_names_the_length_that_runs_past(
    client: TestClient, prompt: int, output: int, field: str
) -> None:
    # Llama 3 8B's context is 8 192 tokens: 512 + 8 000 runs past it in the output; a prompt of 8 192 or more leaves
    # no room for the output's first token.
    load = {**SERVING["load"], "prompt_tokens": {"kind": "fixed", "value": prompt},  # type: ignore[dict-item]
            "output_tokens": {"kind": "fixed", "value": output}}  # fmt: skip
    detail = error(client.post("/v1/estimate/serving", json={**SERVING, "load": load}), 422, field)
    assert "exceeds the model's context of 8192" in detail["message"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"prefill": {"workers": 2}}, "body.prefill"),
        ({"decode": {"workers": 2}}, "body.decode"),
        ({"mode": "disaggregated", "prefill": {}, "decode": {}, "replicas": 2}, "body.replicas"),
        ({"mode": "disaggregated", "prefill": {}, "decode": {}, "parallelism": {"tensor": 2}}, "body.parallelism"),
        ({"mode": "disaggregated", "prefill": {}, "decode": {}, "engine": {"max_num_seqs": 8}}, "body.engine"),
        ({"mode": "disaggregated", "prefill": {}}, "body.decode"),
    ],
)
def test_a_field_of_the_other_serving_mode_is_refused(client: TestClient, change: dict[str, Any], field: str) -> None:
    error(client.post("/v1/estimate/serving", json={**SERVING, **change}), 422, field)


def test_the_docs_state_the_plan_candidates_the_code_allows() -> None:
    text = (Path(__file__).parents[2] / "docs" / "api.md").read_text()
    section = text.split("## Limits on requests", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in section.splitlines() if line.startswith("| `POST /v1/plan`"))
    allowed = f"{limits.MAX_SERVING_PLAN_CANDIDATES:,}".replace(",", " ")
    assert row.split("|")[2].strip().startswith(f"{allowed} /")
    # The notes under the table say the same figure.
    notes = [note.replace("\n  ", " ") for note in section.split("\n- ")[1:] if "serving plan's limit" in note]
    assert notes and all(f"{allowed} candidates" in note for note in notes), notes
    assert "5 000" not in section
