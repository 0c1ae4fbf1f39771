"""POST /v1/estimate/training over HTTP, on SQLite and PostgreSQL: the examples answer, the body validates as
`TrainingRead`, and bad input is a 422 naming the field and saying what is allowed."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.training import TrainingRead
from service.examples import TRAINING_EXAMPLES
from tests.roofline.training.test_scale import hierarchical_all_reduce

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


# Llama 3 405B trained on 16 384 H100s (Meta, "The Llama 3 Herd of Models", 2024, §3.3); clusters now hold 100 000+.
@pytest.mark.parametrize("devices", [16_384, 131_072])
def test_a_step_on_a_cluster_of_h100s_reduces_its_gradients_hierarchically(client: TestClient, devices: int) -> None:
    # Llama 3 8B, data parallel over every GPU: the gradients (bf16, memory.gradients_bytes) all-reduced once per step
    # over the profile's 8-GPU NVLink 4 nodes and NDR NICs, as worked by hand in tests/roofline/training/test_scale.py
    # (the profile's figures there are the catalogue's: tests/adapters/test_core_mapping.py). 15 GB: Simple.
    body = {"model": "llama-3-8b", "hardware": "h100-sxm", "devices": devices, "sequence": 8192, "micro_batch": 1,
            "global_batch": devices, "train_tokens": 15e12}  # fmt: skip
    response = client.post(PATH, json=body)
    assert response.status_code == 200, response.text
    doc = TrainingRead.model_validate(response.json())
    assert (doc.devices, doc.data, doc.micro_batches) == (devices, devices, 1)
    (row,) = doc.communication
    assert (row.name, row.devices, row.bytes) == ("data_parallel_all_reduce", devices, doc.memory.gradients_bytes)
    candidates = hierarchical_all_reduce(row.bytes, devices // 8)
    assert min(candidates, key=candidates.__getitem__) == "hierarchical/simple"
    assert row.time_s == pytest.approx(candidates["hierarchical/simple"], rel=1e-12)
    assert doc.communication_exposed_s == row.time_s


def test_a_step_on_2_to_the_20_devices_answers(client: TestClient) -> None:
    # The largest job the API takes (schemas.limits.MAX_DEVICES): TP 8 in each of 131 072 nodes, data parallel across.
    body = {"model": "llama-3-8b", "hardware": "h100-sxm", "devices": 1 << 20, "parallelism": {"tensor": 8},
            "sequence": 8192, "micro_batch": 1, "global_batch": 1 << 17, "train_tokens": 15e12}  # fmt: skip
    response = client.post(PATH, json=body)
    assert response.status_code == 200, response.text
    doc = TrainingRead.model_validate(response.json())
    assert (doc.devices, doc.data) == (1 << 20, 1 << 17)
    assert [(c.name, c.devices) for c in doc.communication] == [
        ("tensor_parallel_all_reduce", 8), ("data_parallel_all_reduce", 1 << 17)
    ]  # fmt: skip
