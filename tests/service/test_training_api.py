"""POST /v1/estimate/training over HTTP, on SQLite and PostgreSQL: the examples answer, the body validates as
`TrainingRead`, and bad input is a 422 naming the field and saying what is allowed."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.training import TrainingRead
from service.examples import TRAINING_EXAMPLES

PATH = "/v1/estimate/training"
LLAMA_8B: dict[str, Any] = TRAINING_EXAMPLES["llama-8b-fsdp"]["value"]


def rejected(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) == {"error", "message", "detail"}
    return [d["field"] for d in body["detail"]]


@pytest.mark.parametrize("name", list(TRAINING_EXAMPLES))
def test_every_example_answers_a_training_read(client: TestClient, name: str) -> None:
    response = client.post(PATH, json=TRAINING_EXAMPLES[name]["value"])
    assert response.status_code == 200, response.text
    doc = TrainingRead.model_validate(response.json())
    assert doc.devices == TRAINING_EXAMPLES[name]["value"]["devices"]
    assert 0 < doc.mfu <= doc.hfu < 1
    assert doc.training is not None and doc.training.time_s > 0


def test_fsdp_reports_its_collectives_and_the_16_bytes_per_parameter(client: TestClient) -> None:
    doc = client.post(PATH, json=LLAMA_8B).json()
    assert [c["op"] for c in doc["communication"]] == ["all_gather", "reduce_scatter"]
    mem = doc["memory"]
    # FSDP full sharding (ZeRO-3) over 8 devices: weights, gradients and states all divided by 8 (2 + 2 + 12 bytes).
    assert mem["optimizer_bytes"] == pytest.approx(6 * mem["weights_bytes"])
    assert mem["gradients_bytes"] == pytest.approx(mem["weights_bytes"])


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"devices": 8, "parallelism": {"tensor": 2, "data": 2}}, "body.parallelism", "8 devices"),
        ({"global_batch": 12}, "body.global_batch", "multiple of micro_batch × data"),
        ({"devices": 8, "parallelism": {"pipeline": 3}, "sharding": {}}, "body.devices", "whole replicas"),
        ({"devices": 6, "parallelism": {"pipeline": 6}, "sharding": {}, "global_batch": 6}, "body.parallelism.pipeline",
         "do not split"),
        ({"recompute": "some"}, "body.recompute", ""),
    ],
)  # fmt: skip
def test_bad_input_names_the_field(client: TestClient, change: dict[str, Any], field: str, says: str) -> None:
    response = client.post(PATH, json={**LLAMA_8B, **change})
    assert field in rejected(response)
    assert says in response.json()["message"]


def test_unknown_fields_are_rejected(client: TestClient) -> None:
    assert "body.batch" in rejected(client.post(PATH, json={**LLAMA_8B, "batch": 4}))


def test_ddp_gradient_buckets_copy_the_gradients(client: TestClient) -> None:
    # PyTorch DDP's default buckets copy every gradient (gradient_as_bucket_view=False); Megatron-LM's are views.
    body = {**LLAMA_8B, "sharding": {}, "parallelism": {"tensor": 2}, "micro_batch": 1, "global_batch": 64}
    views = client.post(PATH, json=body).json()["memory"]
    copies = client.post(PATH, json={**body, "gradient_buckets": "copies"}).json()["memory"]
    assert views["gradient_bucket_bytes"] == 0 and views["gathered_bytes"] == 0
    assert copies["gradient_bucket_bytes"] == copies["gradients_bytes"]
    assert copies["total_bytes"] == pytest.approx(views["total_bytes"] + views["gradients_bytes"])
    fsdp = client.post(PATH, json=LLAMA_8B).json()["memory"]
    assert fsdp["gathered_bytes"] > 0 and fsdp["buffers_bytes"] == fsdp["gathered_bytes"]


def test_a_step_carries_its_prediction_interval(client: TestClient) -> None:
    doc = client.post(PATH, json=LLAMA_8B).json()
    assert doc["step_s_p10"] < doc["step_s"] < doc["step_s_p90"]
    tokens = doc["tokens_per_s"] * doc["step_s"]  # tokens per step
    assert doc["tokens_per_s_p10"] == pytest.approx(tokens / doc["step_s_p90"])
    assert doc["tokens_per_s_p90"] == pytest.approx(tokens / doc["step_s_p10"])
