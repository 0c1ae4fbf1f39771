"""/v1/hardware over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from hardware_db import load_yaml
from hardware_db._loader import HARDWARE_DIR

pytestmark = pytest.mark.databases  # storage: every test here runs on SQLite and PostgreSQL


def user_profile(slug: str = "h100-5tbs") -> dict[str, Any]:
    doc = load_yaml(HARDWARE_DIR / "h100-sxm.yaml")
    doc["slug"] = slug
    doc["name"] = "What-if H100 with 5 TB/s"
    doc["memory"]["device"]["bandwidth_bytes_per_s"] = 5e12
    doc["sources"].append({"key": "WHAT-IF", "title": "Hypothetical bandwidth"})
    doc["figure_sources"]["memory.device.bandwidth_bytes_per_s"] = "WHAT-IF"
    return doc


def fields(response: Any) -> list[str]:
    return [d["field"] for d in response.json()["detail"]]


def test_get_h100_returns_the_profile_with_its_sources(client: TestClient) -> None:
    response = client.get("/v1/hardware/h100-sxm")
    assert response.status_code == 200
    body = response.json()
    assert body["slug"] == "h100-sxm" and body["builtin"] is True
    assert body["compute"]["matrix_flops_per_s"]["bf16"] == 989e12
    assert body["memory"]["device"]["bandwidth_bytes_per_s"] == 3.35e12
    keys = {s["key"] for s in body["sources"]}
    assert body["figure_sources"]["memory.device"] in keys
    assert any(s["url"] and s["url"].startswith("https://") for s in body["sources"])


def test_unknown_slug_is_a_404_envelope(client: TestClient) -> None:
    response = client.get("/v1/hardware/nope")
    assert response.status_code == 404
    assert response.json() == {
        "error": "not_found",
        "message": "No hardware profile with slug 'nope' (path.slug); GET /v1/hardware lists them.",
        "detail": [
            {
                "field": "path.slug",
                "message": "no hardware profile 'nope': GET /v1/hardware lists them",
                "type": "not_found",
            }
        ],
    }


def test_negative_bandwidth_is_a_422_naming_the_field(client: TestClient, writer: dict[str, str]) -> None:
    doc = user_profile()
    doc["memory"]["device"]["bandwidth_bytes_per_s"] = -3.35e12
    response = client.post("/v1/hardware", json=doc, headers=writer)
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "validation_error"
    assert "body.memory.device.bandwidth_bytes_per_s" in fields(response)
    assert "body.memory.device.bandwidth_bytes_per_s" in body["message"]


def test_nan_is_rejected(client: TestClient, writer: dict[str, str]) -> None:
    # Python's json accepts the NaN literal; the schema must not.
    raw = '{"slug": "x", "memory": {"device": {"bandwidth_bytes_per_s": NaN}}}'
    response = client.post("/v1/hardware", content=raw, headers={**writer, "content-type": "application/json"})
    assert response.status_code == 422
    assert "body.memory.device.bandwidth_bytes_per_s" in fields(response)


def test_malformed_json_is_a_422_envelope(client: TestClient, writer: dict[str, str]) -> None:
    response = client.post("/v1/hardware", content="{not json", headers={**writer, "content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["error"] == "validation_error"


def test_list_is_paged_and_filtered(client: TestClient) -> None:
    everything = client.get("/v1/hardware", params={"limit": 500}).json()
    assert everything["total"] >= 19 and len(everything["items"]) == everything["total"]
    page = client.get("/v1/hardware", params={"limit": 5, "offset": 5}).json()
    assert [i["slug"] for i in page["items"]] == [i["slug"] for i in everything["items"][5:10]]
    assert page["total"] == everything["total"]
    tpus = client.get("/v1/hardware", params={"kind": "tpu"}).json()
    assert {i["slug"] for i in tpus["items"]} == {"tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e"}
    amd = client.get("/v1/hardware", params={"vendor": "amd"}).json()
    assert {i["slug"] for i in amd["items"]} == {"mi250x", "mi300x", "mi325x", "mi355x"}


@pytest.mark.parametrize(("param", "value"), [("limit", 0), ("limit", 501), ("offset", -1), ("kind", "fpga")])
def test_bad_query_parameters_name_the_parameter(client: TestClient, param: str, value: Any) -> None:
    response = client.get("/v1/hardware", params={param: value})
    assert response.status_code == 422
    assert fields(response) == [f"query.{param}"]


def test_user_profile_full_crud(client: TestClient, writer: dict[str, str]) -> None:
    created = client.post("/v1/hardware", json=user_profile(), headers=writer)
    assert created.status_code == 201, created.text
    assert created.json()["builtin"] is False
    assert client.get("/v1/hardware/h100-5tbs").json()["memory"]["device"]["bandwidth_bytes_per_s"] == 5e12

    patched = client.patch(
        "/v1/hardware/h100-5tbs", json={"memory": {"device": {"bandwidth_bytes_per_s": 6e12}}}, headers=writer
    )
    assert patched.status_code == 200, patched.text
    body = patched.json()
    assert body["memory"]["device"]["bandwidth_bytes_per_s"] == 6e12
    assert body["memory"]["device"]["capacity_bytes"] == 80_000_000_000  # merge patch keeps the rest

    assert client.delete("/v1/hardware/h100-5tbs", headers=writer).status_code == 204
    assert client.get("/v1/hardware/h100-5tbs").status_code == 404
    assert client.delete("/v1/hardware/h100-5tbs", headers=writer).status_code == 404


def test_duplicate_slug_is_a_409(client: TestClient, writer: dict[str, str]) -> None:
    assert client.post("/v1/hardware", json=user_profile(), headers=writer).status_code == 201
    again = client.post("/v1/hardware", json=user_profile(), headers=writer)
    assert again.status_code == 409 and again.json()["error"] == "conflict"
    builtin = client.post("/v1/hardware", json=user_profile("h100-sxm"), headers=writer)
    assert builtin.status_code == 409


def test_builtin_entries_are_read_only(client: TestClient, writer: dict[str, str]) -> None:
    patched = client.patch("/v1/hardware/h100-sxm", json={"name": "mine now"}, headers=writer)
    assert patched.status_code == 403 and patched.json()["error"] == "read_only"
    deleted = client.delete("/v1/hardware/h100-sxm", headers=writer)
    assert deleted.status_code == 403
    assert client.get("/v1/hardware/h100-sxm").json()["name"] == "NVIDIA H100 SXM5 80GB"


def test_patch_that_breaks_the_profile_names_the_field(client: TestClient, writer: dict[str, str]) -> None:
    client.post("/v1/hardware", json=user_profile(), headers=writer)
    response = client.patch("/v1/hardware/h100-5tbs", json={"efficiency": {"matmul": 1.5}}, headers=writer)
    assert response.status_code == 422
    assert fields(response) == ["body.efficiency.matmul"]
    unchanged = client.get("/v1/hardware/h100-5tbs").json()
    assert unchanged["efficiency"]["matmul"] == 0.81


def test_patch_cannot_rename(client: TestClient, writer: dict[str, str]) -> None:
    client.post("/v1/hardware", json=user_profile(), headers=writer)
    response = client.patch("/v1/hardware/h100-5tbs", json={"slug": "other"}, headers=writer)
    assert response.status_code == 422 and "slug" in response.json()["message"]


def test_patch_removing_a_cited_figure_keeps_citations_consistent(client: TestClient, writer: dict[str, str]) -> None:
    client.post("/v1/hardware", json=user_profile(), headers=writer)
    # Removing the power section leaves a citation of a field that no longer exists: rejected, names it.
    response = client.patch("/v1/hardware/h100-5tbs", json={"power": None}, headers=writer)
    assert response.status_code == 422
    assert "power.tdp_w" in response.json()["message"]
    fixed = client.patch(
        "/v1/hardware/h100-5tbs", json={"power": None, "figure_sources": {"power.tdp_w": None}}, headers=writer
    )
    assert fixed.status_code == 200 and fixed.json()["power"] is None


def test_openapi_declares_the_error_envelope(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/v1/hardware/{slug}"]["get"]
    assert op["responses"]["404"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorEnvelope")
    post = spec["paths"]["/v1/hardware"]["post"]
    assert post["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorEnvelope")
