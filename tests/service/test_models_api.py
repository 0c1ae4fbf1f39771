"""/v1/models over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from hardware_db import load_yaml
from hardware_db._loader import MODELS_DIR

pytestmark = pytest.mark.databases  # storage: every test here runs on SQLite and PostgreSQL


def user_model(slug: str = "my-8b") -> dict[str, Any]:
    doc = load_yaml(MODELS_DIR / "llama-3-8b.yaml")
    doc["slug"], doc["name"], doc["family"] = slug, "In-house 8B", "in-house"
    return doc


def test_get_a_builtin_model(client: TestClient) -> None:
    body = client.get("/v1/models/llama-3-70b").json()
    assert (body["layers"], body["hidden_size"], body["heads"], body["kv_heads"]) == (80, 8192, 64, 8)
    assert body["builtin"] is True and body["sources"]


def test_list_and_filter_by_family(client: TestClient) -> None:
    everything = client.get("/v1/models").json()
    assert everything["total"] >= 14
    llama2 = client.get("/v1/models", params={"family": "llama-2"}).json()
    assert {m["slug"] for m in llama2["items"]} == {"llama-2-7b", "llama-2-13b", "llama-2-70b"}


def test_user_model_crud(client: TestClient, writer: dict[str, str]) -> None:
    assert client.post("/v1/models", json=user_model(), headers=writer).status_code == 201
    patched = client.patch("/v1/models/my-8b", json={"max_context_tokens": 65536}, headers=writer)
    assert patched.status_code == 200 and patched.json()["max_context_tokens"] == 65536
    assert client.get("/v1/models", params={"family": "in-house"}).json()["total"] == 1
    assert client.delete("/v1/models/my-8b", headers=writer).status_code == 204
    assert client.get("/v1/models/my-8b").status_code == 404


def test_kv_heads_must_divide_heads(client: TestClient, writer: dict[str, str]) -> None:
    doc = user_model()
    doc["kv_heads"] = 7
    response = client.post("/v1/models", json=doc, headers=writer)
    assert response.status_code == 422
    assert "kv_heads must divide heads" in response.json()["message"]


def test_zero_layers_names_the_field(client: TestClient, writer: dict[str, str]) -> None:
    doc = user_model()
    doc["layers"] = 0
    response = client.post("/v1/models", json=doc, headers=writer)
    assert response.status_code == 422
    assert [d["field"] for d in response.json()["detail"]] == ["body.layers"]


def test_a_moe_layer_step_past_the_layers_names_the_field(client: TestClient, writer: dict[str, str]) -> None:
    doc = load_yaml(MODELS_DIR / "llama-4-maverick.yaml")
    doc["slug"], doc["moe"]["layer_step"] = "my-maverick", 49  # 48 layers: no 49th to be a MoE layer
    response = client.post("/v1/models", json=doc, headers=writer)
    assert response.status_code == 422
    assert [d["field"] for d in response.json()["detail"]] == ["body.moe.layer_step"]
    doc["moe"]["layer_step"] = 0
    response = client.post("/v1/models", json=doc, headers=writer)
    assert [d["field"] for d in response.json()["detail"]] == ["body.moe.layer_step"]


def test_builtin_model_is_read_only(client: TestClient, writer: dict[str, str]) -> None:
    assert client.patch("/v1/models/gpt2", json={"layers": 13}, headers=writer).status_code == 403
    assert client.delete("/v1/models/gpt2", headers=writer).status_code == 403
