"""POST /v1/estimate/inference and /v1/estimate/inference/batch over HTTP, on SQLite and PostgreSQL.

Expected numbers are worked out by hand from the catalogue (hardware_db/models/*.yaml, hardware_db/hardware/*.yaml)
and seed 004's calculator (../shared/seeds/004_f1ad41962af10fb3.txt).
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from schemas.inference import InferenceBatchRead, InferenceRead
from service.examples import INFERENCE_BATCH_EXAMPLES, INFERENCE_EXAMPLES

SEED_004: dict[str, Any] = INFERENCE_EXAMPLES["seed-004-mqa"]["value"]
LLAMA_70B = {
    "model": "llama-3-70b",
    "hardware": "h100-sxm",
    "workload": {"batch": 8, "prompt_tokens": 1024, "output_tokens": 128},
}
H100_TDP_W = 700.0


def post(client: TestClient, body: dict[str, Any], path: str = "/v1/estimate/inference") -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def rejected(response: Any, status: int = 422) -> list[str]:
    """The response is an error envelope with this status; returns the fields it names (each also in the message)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "message", "detail"}
    fields = [d["field"] for d in body["detail"]]
    for field in fields[:5]:
        assert field in body["message"]
    return fields


def op(result: dict[str, Any], phase: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(o for o in result["breakdown"][phase]["ops"] if o["op"] == name)
    return found


@pytest.mark.parametrize("name", list(INFERENCE_EXAMPLES))
def test_every_swagger_example_answers(client: TestClient, name: str) -> None:
    result = post(client, INFERENCE_EXAMPLES[name]["value"])
    InferenceRead.model_validate(result)
    assert result["total_time_s"] == pytest.approx(result["prefill_time_s"] + result["decode_time_s"])
    for phase in ("prefill", "decode"):
        shares = [o["share"] for o in result["breakdown"][phase]["ops"]]
        assert sum(shares) == pytest.approx(1.0)


@pytest.mark.parametrize("name", list(INFERENCE_BATCH_EXAMPLES))
def test_every_batch_example_answers(client: TestClient, name: str) -> None:
    result = post(client, INFERENCE_BATCH_EXAMPLES[name]["value"], "/v1/estimate/inference/batch")
    InferenceBatchRead.model_validate(result)
    assert result["items"]


def test_seed_004_through_the_api(client: TestClient) -> None:
    mha = {**SEED_004, "attention": {"kind": "mha"}}
    both = post(client, {"items": [mha, SEED_004]}, "/v1/estimate/inference/batch")["items"]
    bs, h, d, layers = 10, 16, 768, 24
    assert [r["memory"]["kv_cache_bytes"] for r in both] == [
        2 * bs * layers * d * 2 * 1024,
        2 * bs * layers * (d // h) * 2 * 1024,
    ]
    assert [round(r["memory"]["kv_cache_bytes"] / 1e9, 3) for r in both] == [0.755, 0.047]
    assert both[0]["parameters"]["attention"] + both[0]["parameters"]["ffn"] == 12 * layers * d * d
    assert both[0]["decode_step_s"]["steps"] == 1023
    # The calculator's per-kernel figures at n = 1024 (its display): e.g. the QKᵀ scores of the last step.
    scores = op(both[0], "decode", "attention_scores")
    assert scores["calls_per_pass"] == layers
    speedup = both[0]["decode_time_s"] / both[1]["decode_time_s"]
    assert 1.15 < speedup < 1.4  # the calculator says 1.02: see tests/roofline/inference/test_seed_004.py


def test_throughput_cost_and_energy_are_the_arithmetic_of_the_run(client: TestClient) -> None:
    body = {**LLAMA_70B, "devices": 8, "parallelism": {"tensor": 4}, "price_per_device_hour": 3.0}
    r = post(client, body)
    assert r["devices"] == 8 and r["parallelism"]["data"] == 2  # two replicas of TP4
    tokens = 2 * 8 * 128  # output tokens of both replicas
    assert r["throughput_tokens_per_s"] == pytest.approx(tokens / r["total_time_s"])
    assert r["cost_per_million_tokens"] == pytest.approx(3.0 * 8 / 3600 / r["throughput_tokens_per_s"] * 1e6)
    # Every device at its TDP for the whole run, per output token.
    assert r["power_per_device_w"] == H100_TDP_W
    assert r["energy_per_token_j"] == pytest.approx(H100_TDP_W * 8 * r["total_time_s"] / tokens)
    assert r["time_per_output_token_s"] == pytest.approx(r["decode_time_s"] / 127)
    assert r["communication"]["tensor_parallel_s"] > 0 and r["communication"]["pipeline_s"] == 0
    assert r["communication_time_s"] == pytest.approx(r["communication"]["total_s"])


def test_llama_3_70b_needs_two_h100s_in_bf16_and_one_in_int8_weights(client: TestClient) -> None:
    one = post(client, LLAMA_70B)
    assert one["memory"]["weights_bytes"] == 2 * 70_553_706_496
    assert not one["memory"]["fits"] and one["max_batch_that_fits"] == 0
    assert any("does not fit" in w for w in one["warnings"])
    int8 = post(client, {**LLAMA_70B, "dtypes": {"weights": "int8"}})
    assert int8["memory"]["fits"]
    # 68 451 041 280 layer parameters at 1 byte; 2 101 346 304 table and 1 318 912 norm parameters at 2 bytes.
    assert int8["memory"]["weights_bytes"] == 68_451_041_280 + 2 * (2_101_346_304 + 1_318_912)
    two = post(client, {**LLAMA_70B, "parallelism": {"tensor": 2}})
    assert two["memory"]["fits"] and two["devices"] == 2


def test_an_inline_model_and_a_patched_profile(client: TestClient) -> None:
    model = client.get("/v1/models/llama-3-8b").json()
    for key in ("builtin", "version", "created_at", "updated_at"):
        model.pop(key)
    model["slug"] = "my-8b"
    base = {"model": model, "hardware": "h100-sxm", "workload": {"batch": 1, "prompt_tokens": 512, "output_tokens": 64}}
    inline = post(client, base)
    assert inline["model"] == "my-8b"
    assert inline["time_per_output_token_s"] == pytest.approx(
        post(client, {**base, "model": "llama-3-8b"})["time_per_output_token_s"]
    )
    # Batch-1 decode is memory-bound: twice the HBM bandwidth (3.35 → 6.7 TB/s) and an L2 that keeps up (every load
    # passes through it: the profile's 5.5 TB/s would bind first) take it well under 0.7 of the time.
    memory = {"device": {"bandwidth_bytes_per_s": 6.7e12}, "cache": {"bandwidth_bytes_per_s": 11e12}}
    fast = post(client, {**base, "hardware_patch": {"memory": memory}})
    assert fast["hardware"] == "h100-sxm (patched)"
    assert fast["time_per_output_token_s"] < 0.7 * inline["time_per_output_token_s"]
    # HBM alone: the L2's 5.5 TB/s × 0.9 now limits, so the memory time falls to 3.35 / 5.5 = 0.61 of itself, not 0.5.
    hbm = post(client, {**base, "hardware_patch": {"memory": {"device": {"bandwidth_bytes_per_s": 6.7e12}}}})
    assert fast["time_per_output_token_s"] < hbm["time_per_output_token_s"] < inline["time_per_output_token_s"]


def test_a_list_of_requests(client: TestClient) -> None:
    body = {
        "model": "llama-3-8b",
        "hardware": "a100-sxm-80gb",
        "workload": {
            "requests": [{"prompt_tokens": 100, "output_tokens": 10}, {"prompt_tokens": 4000, "output_tokens": 500}]
        },
    }
    r = post(client, body)
    assert r["batch"] == 2 and r["decode_step_s"]["steps"] == 499
    assert r["memory"]["kv_cache_bytes"] == (109 + 4499) * 2 * 32 * 8 * 128 * 2


def test_a_sweep_is_the_grid_in_order(client: TestClient) -> None:
    sweep = {
        "base": LLAMA_70B,
        "vary": {"parallelism.tensor": [2, 4], "dtypes.weights": ["bf16", "fp8"], "workload.batch": [1, 16]},
    }
    r = post(client, {"sweep": sweep}, "/v1/estimate/inference/batch")
    assert r["grid"] == {
        "parallelism.tensor": [2, 2, 2, 2, 4, 4, 4, 4],
        "dtypes.weights": ["bf16", "bf16", "fp8", "fp8"] * 2,
        "workload.batch": [1, 16] * 4,
    }
    items = r["items"]
    assert [i["parallelism"]["tensor"] for i in items] == r["grid"]["parallelism.tensor"]
    assert [i["batch"] for i in items] == r["grid"]["workload.batch"]
    assert items[2]["memory"]["weights_bytes"] < 0.55 * items[0]["memory"]["weights_bytes"]  # fp8 weights


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"parallelism": {"tensor": 3}}, "body.parallelism.tensor"),
        ({"parallelism": {"expert": 2}}, "body.parallelism.expert"),
        ({"hardware": "a100-sxm-80gb", "dtypes": {"activations": "fp8"}}, "body.dtypes.activations"),
        ({"hardware": "a100-sxm-80gb", "dtypes": {"attention": "fp4"}}, "body.dtypes.attention"),
        ({"devices": 6, "parallelism": {"tensor": 4}}, "body.devices"),
        ({"devices": 8, "parallelism": {"tensor": 4, "data": 1}}, "body.devices"),
        ({"workload": {"batch": 1, "prompt_tokens": 10}}, "body.workload"),
        ({"workload": {"batch": 0, "prompt_tokens": 10, "output_tokens": 10}}, "body.workload.batch"),
        (
            {"workload": {"requests": [{"prompt_tokens": 1, "output_tokens": 0}]}},
            "body.workload.requests.0.output_tokens",
        ),
        ({"attention": {"kind": "gqa"}}, "body.attention"),
        ({"attention": {"kind": "gqa", "kv_heads": 5}}, "body.attention.kv_heads"),
        ({"dtypes": {"weights": "int3"}}, "body.dtypes.weights"),
        ({"dtypes": {"weights": "fp8", "activations": "fp8", "fp8_scaling": "row"}}, "body.dtypes.fp8_scaling"),
        ({"implementation": {"attention": "sparse"}}, "body.implementation.attention"),
        ({"price_per_device_hour": -1}, "body.price_per_device_hour"),
        ({"model": {"slug": "x", "layers": 0}}, "body.model.layers"),
        ({"hardware": "a100-sxm-80gb", "parallelism": {"tensor": 16}}, "body.parallelism.tensor"),
        ({"extra": 1}, "body.extra"),
        ({"options": {"calibration": 0}}, "body.options.calibration"),
    ],
)
def test_bad_input_names_the_field(client: TestClient, change: dict[str, Any], field: str) -> None:
    assert field in rejected(client.post("/v1/estimate/inference", json={**LLAMA_70B, **change}))


def test_an_inline_moe_layer_step_past_the_layers_names_the_field(client: TestClient) -> None:
    maverick = client.get("/v1/models/llama-4-maverick").json()
    config = {k: v for k, v in maverick.items() if k not in ("builtin", "version", "created_at", "updated_at")}
    config["moe"]["layer_step"] = 49  # 48 layers
    assert rejected(client.post("/v1/estimate/inference", json={**LLAMA_70B, "model": config})) == [
        "body.model.moe.layer_step"
    ]


def test_an_interleaved_moe_model_runs_its_dense_and_moe_layers(client: TestClient) -> None:
    body = {**LLAMA_70B, "model": "llama-4-maverick", "hardware": "h200-sxm", "devices": 8,
            "parallelism": {"tensor": 8}, "dtypes": {"weights": "fp8"}}  # fmt: skip
    response = client.post("/v1/estimate/inference", json=body)
    assert response.status_code == 200, response.text
    read = InferenceRead.model_validate(response.json())
    calls = {row.op: row.calls_per_pass for row in read.breakdown.decode.ops}
    assert calls["ffn_up"] == calls["experts"] == 24  # 48 layers, every other one MoE (layer_step 2)
    assert read.parameters.total == 400_711_848_960  # hardware_db/models/llama-4-maverick.yaml's count


def test_non_finite_numbers_are_rejected(client: TestClient) -> None:
    response = client.post(
        "/v1/estimate/inference",
        content=b'{"model": "llama-3-8b", "hardware": "h100-sxm", "price_per_device_hour": NaN,'
        b' "workload": {"batch": 1, "prompt_tokens": 1, "output_tokens": 2}}',
        headers={"content-type": "application/json"},
    )
    assert "body.price_per_device_hour" in rejected(response)


def test_unknown_catalogue_entries_are_404(client: TestClient) -> None:
    rejected(client.post("/v1/estimate/inference", json={**LLAMA_70B, "model": "nope"}), 404)
    rejected(client.post("/v1/estimate/inference", json={**LLAMA_70B, "hardware": "nope"}), 404)


def test_batch_errors_name_the_item_or_the_swept_path(client: TestClient) -> None:
    items = [LLAMA_70B, {**LLAMA_70B, "parallelism": {"tensor": 3}}]
    fields = rejected(client.post("/v1/estimate/inference/batch", json={"items": items}))
    assert fields == ["body.items.1.parallelism.tensor"]
    bad_path = {"base": LLAMA_70B, "vary": {"model.layers": [1]}}
    assert "body.sweep.vary" in rejected(client.post("/v1/estimate/inference/batch", json={"sweep": bad_path}))
    bad_value = {"base": LLAMA_70B, "vary": {"parallelism.tensor": [2, 0]}}
    fields = rejected(client.post("/v1/estimate/inference/batch", json={"sweep": bad_value}))
    assert fields == ["body.sweep.vary.parallelism.tensor"]
    both = {"items": [LLAMA_70B], "sweep": {"base": LLAMA_70B, "vary": {"workload.batch": [1]}}}
    rejected(client.post("/v1/estimate/inference/batch", json=both))
    too_many = {
        "base": LLAMA_70B,
        "vary": {"workload.batch": list(range(1, 101)), "parallelism.tensor": list(range(1, 12))},
    }
    assert "body.sweep.vary" in rejected(client.post("/v1/estimate/inference/batch", json={"sweep": too_many}))


def test_swagger_shows_an_example_for_each_endpoint(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/estimate/inference", "/v1/estimate/inference/batch", "/v1/plan"):
        content = paths[path]["post"]["requestBody"]["content"]["application/json"]
        assert content["examples"], path
        assert paths[path]["post"]["summary"], path


def test_deepseek_v3_runs_with_latent_attention(client: TestClient) -> None:
    body = {
        "model": "deepseek-v3",
        "hardware": "h200-sxm",
        "parallelism": {"tensor": 8},
        "workload": {"batch": 4, "prompt_tokens": 1000, "output_tokens": 25},
        "dtypes": {"weights": "fp8"},
    }
    r = post(client, body)
    assert r["memory"]["kv_cache_bytes"] == 4 * 1024 * 61 * 576 * 2  # one 576-value latent per token and layer
    assert r["warnings"] == []
    fields = rejected(client.post("/v1/estimate/inference", json={**body, "attention": {"kind": "mqa"}}))
    assert fields == ["body.attention"]


def test_an_nvfp4_deepseek_keeps_its_attention_in_bf16(client: TestClient) -> None:
    """`dtypes.attention`: DeepSeek-R1's NVFP4 checkpoint on 8 B200s keeps self-attention in bf16. Every layer's
    attention matrices (187 107 328 parameters; the latent's down projections and norms, 7168·1536 + 7168·576 + 2048,
    on every device, the rest split 8 ways) are stored at 2 bytes instead of NVFP4's 0.5625."""
    body = {
        "model": "deepseek-v3",
        "hardware": "b200",
        "parallelism": {"tensor": 8},
        "workload": {"batch": 4, "prompt_tokens": 1000, "output_tokens": 25},
        "dtypes": {"weights": "fp4", "activations": "fp4", "kv_cache": "fp8"},
    }
    fp4 = post(client, body)
    kept = post(client, {**body, "dtypes": {**body["dtypes"], "attention": "bf16"}})
    replicated = 7168 * 1536 + 7168 * 576 + 1536 + 512
    split = 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168
    grown = kept["memory"]["weights_bytes"] - fp4["memory"]["weights_bytes"]
    assert grown == pytest.approx(61 * (replicated + split / 8) * (2 - 0.5625), rel=1e-9)


def test_a_run_carries_its_prediction_interval(client: TestClient) -> None:
    # Tensor 4: every op and all-reduce at its band's edge together (docs/model/intervals.md).
    result = post(client, {**LLAMA_70B, "parallelism": {"tensor": 4}})
    assert result["assumptions"]["interval"]["quantiles"] == [0.1, 0.9]
    for phase in ("prefill", "decode"):
        got = result["breakdown"][phase]
        for row in got["ops"]:
            assert row["time_s_p10"] <= row["time_s"] <= row["time_s_p90"], row["op"]
        comm = op(result, phase, "tensor_parallel_all_reduce")
        assert comm["time_s_p10"] < comm["time_s"] < comm["time_s_p90"]
        assert got["time_s_p10"] == pytest.approx(sum(r["time_s_p10"] for r in got["ops"]))
        assert got["time_s_p90"] == pytest.approx(sum(r["time_s_p90"] for r in got["ops"]))
        assert got["time_s_p10"] < got["time_s"] < got["time_s_p90"]
        assert result[f"{phase}_time_s_p10"] == got["time_s_p10"]
    assert result["total_time_s_p10"] == pytest.approx(result["prefill_time_s_p10"] + result["decode_time_s_p10"])
    assert result["total_time_s_p90"] == pytest.approx(result["prefill_time_s_p90"] + result["decode_time_s_p90"])
    assert result["time_per_output_token_s_p90"] == pytest.approx(result["decode_time_s_p90"] / 127)
    # Throughput's low end is the tokens over the long end of the time: 8 × 128 output tokens.
    assert result["throughput_tokens_per_s_p10"] == pytest.approx(8 * 128 / result["total_time_s_p90"])
    assert result["throughput_tokens_per_s_p90"] == pytest.approx(8 * 128 / result["total_time_s_p10"])


def test_block_scaled_fp8_is_slower_than_per_tensor_and_says_so_in_its_rows(client: TestClient) -> None:
    """DeepSeek-V3 in fp8 on 8 H200s: `fp8_scaling: block` runs the block-scaled scheme (its products at the block
    kernels' lower rate, its input quantised per 128-value group inside the product's row): no `ffn_down_quantize`
    row, which the per-tensor run has, and a longer time to first token."""
    body = {"model": "deepseek-v3", "hardware": "h200-sxm", "devices": 8, "parallelism": {"tensor": 8},
            "workload": {"batch": 4, "prompt_tokens": 1024, "output_tokens": 2},
            "dtypes": {"weights": "fp8", "activations": "fp8", "kv_cache": "bf16"}}  # fmt: skip
    tensor = client.post("/v1/estimate/inference", json=body)
    block = client.post("/v1/estimate/inference", json={**body, "dtypes": {**body["dtypes"], "fp8_scaling": "block"}})
    assert tensor.status_code == block.status_code == 200, block.text
    names = lambda r: {row["op"] for row in r.json()["breakdown"]["prefill"]["ops"]}  # noqa: E731
    assert "ffn_down_quantize" in names(tensor) and "ffn_down_quantize" not in names(block)
    assert block.json()["breakdown"]["prefill"]["time_s"] > tensor.json()["breakdown"]["prefill"]["time_s"]
