"""Inference requests as core runs: model configs field by field (catalogue figures, hardware_db/models/*.yaml), the
attention what-if, the data-parallel degree a device count implies, and the response a run renders to."""

from __future__ import annotations

from typing import Any

import pytest

import adapters
import roofline
from schemas.inference import AttentionOverride, InferenceRead, InferenceRequest
from tests.adapters.conftest import A100, MODELS


def test_llama_3_8b_maps_field_by_field() -> None:
    model = adapters.transformer(MODELS["llama-3-8b"], None)
    assert (model.layers, model.hidden, model.heads, model.kv_heads, model.head_dim) == (32, 4096, 32, 8, 128)
    assert (model.ffn, model.gated, model.activation, model.vocab) == (14336, True, "silu", 128256)
    assert (model.tied_embeddings, model.rms_norm, model.rotary, model.position_table) == (False, True, True, 0)
    assert (model.window, model.window_layers, model.moe, model.mla) == (None, 0, None, None)


def test_gpt2_learns_its_positions_and_gemma_2_alternates_its_window() -> None:
    gpt2 = adapters.transformer(MODELS["gpt2"], None)
    assert (gpt2.position_table, gpt2.gated, gpt2.rms_norm, gpt2.bias) == (1024, False, False, True)
    gemma = adapters.transformer(MODELS["gemma-2-9b"], None)
    assert (gemma.window, gemma.window_layers) == (4096, 21)  # every other one of 42 layers


def test_deepseek_v3s_experts_and_latent_attention() -> None:
    model = adapters.transformer(MODELS["deepseek-v3"], None)
    assert model.moe == roofline.Moe(experts=256, top_k=8, expert_ffn=2048, shared_experts=1, dense_layers=3)
    assert model.mla == roofline.Mla(kv_lora_rank=512, rope_dim=64, nope_dim=128, v_dim=128, q_lora_rank=1536)


@pytest.mark.parametrize(
    ("what_if", "kv_heads"), [({"kind": "mha"}, 32), ({"kind": "mqa"}, 1), ({"kind": "gqa", "kv_heads": 4}, 4)]
)
def test_the_attention_what_if_sets_the_kv_heads(what_if: dict[str, Any], kv_heads: int) -> None:
    override = AttentionOverride.model_validate(what_if)
    assert adapters.transformer(MODELS["llama-3-8b"], override).kv_heads == kv_heads


def test_a_what_if_the_model_cannot_take_names_its_field() -> None:
    with pytest.raises(adapters.InvalidField) as raised:
        adapters.transformer(MODELS["llama-3-8b"], AttentionOverride(kind="gqa", kv_heads=3), "body.items.2")
    assert raised.value.field == "body.items.2.attention.kv_heads"
    assert raised.value.message == "3 KV heads do not divide the model's 32 heads"
    with pytest.raises(adapters.InvalidField) as raised:
        adapters.transformer(MODELS["deepseek-v3"], AttentionOverride(kind="mqa"))
    assert raised.value.field == "body.attention"


def _prepared(**fields: Any) -> adapters.Prepared:
    body = InferenceRequest.model_validate(
        {
            "model": "llama-3-8b",
            "hardware": A100.slug,
            "workload": {"batch": 4, "prompt_tokens": 128, "output_tokens": 8},
        }
        | fields
    )
    system = adapters.inference_system(A100, body, None)
    return adapters.prepare_run(body, (MODELS["llama-3-8b"], "llama-3-8b"), (A100, A100.slug, system, None))


def test_a_device_count_is_whole_replicas_of_tensor_times_pipeline() -> None:
    assert _prepared(devices=8, parallelism={"tensor": 2, "pipeline": 2}).data == 2
    assert _prepared(parallelism={"tensor": 2, "data": 3}).data == 3
    with pytest.raises(adapters.InvalidField) as raised:
        _prepared(devices=6, parallelism={"tensor": 4})
    assert raised.value.field == "body.devices"
    with pytest.raises(adapters.InvalidField, match="tensor 2 × pipeline 1 × data 3 = 6"):
        _prepared(devices=8, parallelism={"tensor": 2, "data": 3})


def test_the_kv_cache_is_stored_in_the_activations_dtype_unless_given() -> None:
    assert _prepared(dtypes={"weights": "fp8", "activations": "bf16"}).run.precision == roofline.Precision(
        "fp8", "bf16", "bf16"
    )
    assert _prepared(dtypes={"kv_cache": "fp8"}).run.precision.kv_cache == "fp8"


def test_a_run_renders_as_an_inference_read() -> None:
    prepared = _prepared(devices=2, parallelism={"tensor": 2}, price_per_device_hour=2.0)
    doc = adapters.render_run(prepared, adapters.estimate_runs([prepared])[0])
    read = InferenceRead.model_validate(doc)
    assert (read.devices, read.batch, read.decode_step_s.steps) == (2, 4, 7)  # the first output token is prefill's
    assert read.total_time_s == pytest.approx(read.prefill_time_s + read.decode_time_s, rel=1e-12)
    assert read.throughput_tokens_per_s == pytest.approx(4 * 8 / read.total_time_s, rel=1e-12)
    # $2 per device-hour, 2 devices: 4 $/h over the tokens an hour produces, per million.
    assert read.cost_per_million_tokens == pytest.approx(4.0 / 3600 / read.throughput_tokens_per_s * 1e6, rel=1e-12)
    assert read.power_per_device_w == 400.0
    assert doc["assumptions"]["calibration"] == "none"
