"""The catalogue's models counted by the core (`roofline.parameter_count` on `adapters.transformer`) against the
totals and active counts their authors publish (cited per row: model cards and papers, as each YAML's sources give
them), and the shapes read from their config.json files."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import roofline
from adapters import transformer
from hardware_db import load_models
from schemas.models import ModelCreate

MODELS = {m.slug: m for m in load_models()}


def count(slug: str) -> roofline.ParameterCount:
    return roofline.parameter_count(transformer(MODELS[slug], None))


@pytest.mark.parametrize(
    ("slug", "total", "active", "rel"),
    [
        ("llama-3.1-8b", 8.03e9, 8.03e9, 0.001),  # model card: 8.03B
        ("llama-3.1-70b", 70.6e9, 70.6e9, 0.001),  # model card: 70.6B
        ("qwen3-32b", 32.8e9, 32.8e9, 0.002),  # model card: 32.8B
        ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02),  # model card: 30.5B total, 3.3B activated
        ("qwen3-235b-a22b", 235e9, 22e9, 0.01),  # model card: 235B total, 22B activated
        ("deepseek-r1", 671e9, 37e9, 0.02),  # DeepSeek-V3 report §4.2 / R1 model card: 671B total, 37B activated
        ("llama-4-maverick", 400e9, 17e9, 0.011),  # Llama 4 card: 400B total, 17B active (vision encoder not modelled)
        # MiniMax-M2 card: "230 billion total parameters with 10 billion active" (rounded: 228.7 B / 11.0 B here,
        # 10.4 B without the input embedding); Kimi K2 card: "1 trillion total", "32 billion activated" (the text
        # decoder: 1 026.4 B / 32.9 B)
        ("minimax-m2.5", 230e9, 10.4e9 + 200064 * 3072, 0.01),
        ("kimi-k2.5", 1.0e12, 32e9, 0.03),
    ],
)
def test_counts_match_the_published_totals(slug: str, total: float, active: float, rel: float) -> None:
    params = count(slug)
    assert params.total == pytest.approx(total, rel=rel)
    assert params.active_per_token == pytest.approx(active, rel=rel)
    assert MODELS[slug].reported_parameters == pytest.approx(total, rel=1e-3)


def test_gpt_oss_120b_is_openais_116_83b_with_5_13b_active_without_the_input_embedding() -> None:
    # OpenAI, gpt-oss model card (arXiv:2508.10925) Table 1: 116.83B total, 5.13B active; it counts the
    # unembedding as active but not the embedding lookup (201,088 × 2,880).
    params = count("gpt-oss-120b")
    assert round(params.total / 1e9, 2) == 116.83
    assert round((params.active_per_token - 201088 * 2880) / 1e9, 2) == 5.13


def test_llama_4_scout_is_the_cards_109b_less_its_vision_encoder() -> None:
    # Llama 4 model card: 109B total, 17B active; the card's total counts the vision encoder, which the catalogue
    # does not model: the text decoder is 107.77 B (tests/roofline/inference/test_moe_layers.py works Maverick's
    # by hand; Scout's is the same with 16 experts in every layer).
    params = count("llama-4-scout")
    d, expert = 5120, 3 * 5120 * 8192
    layer = d * (40 + 16) * 128 + 40 * 128 * d + 17 * expert + d * 16
    assert params.total == 48 * layer + 2 * 202048 * d + (2 * 48 + 1) * d == 107_769_861_120
    assert 107e9 < params.total < 109e9
    assert params.active_per_token == pytest.approx(17e9, rel=0.011)


@pytest.mark.parametrize(
    ("slug", "layers", "hidden", "heads", "kv_heads", "head_dim", "vocab"),
    [  # each model's config.json, as its YAML's HF-CONFIG source quotes it
        ("llama-3.1-8b", 32, 4096, 32, 8, 128, 128256),
        ("llama-3.1-70b", 80, 8192, 64, 8, 128, 128256),
        ("qwen3-32b", 64, 5120, 64, 8, 128, 151936),
        ("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 151936),
        ("qwen3-235b-a22b", 94, 4096, 64, 4, 128, 151936),
        ("gpt-oss-120b", 36, 2880, 64, 8, 64, 201088),
        ("deepseek-r1", 61, 7168, 128, 128, 128, 129280),
        ("llama-4-scout", 48, 5120, 40, 8, 128, 202048),
        ("llama-4-maverick", 48, 5120, 40, 8, 128, 202048),
        ("minimax-m2.5", 62, 3072, 48, 8, 128, 200064),
        ("kimi-k2.5", 61, 7168, 64, 64, 128, 163840),
    ],
)
def test_shapes_are_the_configs(
    slug: str, layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int, vocab: int
) -> None:
    m = MODELS[slug]
    assert (m.layers, m.hidden_size, m.heads, m.kv_heads, m.head_dim, m.vocab_size) == (
        layers, hidden, heads, kv_heads, head_dim, vocab,
    )  # fmt: skip
    assert any("config.json" in (s.url or "") for s in m.sources)


def moe_of(slug: str) -> tuple[int, int, int, int, int, int]:
    moe = MODELS[slug].moe
    assert moe is not None
    return moe.experts, moe.top_k, moe.shared_experts, moe.expert_ffn_size, moe.dense_layers, moe.layer_step


def test_mixture_of_experts_layouts() -> None:
    # (experts, top_k, shared, expert width, leading dense layers, step): from the configs' num_experts /
    # num_local_experts, num_experts_per_tok, moe_intermediate_size / intermediate_size, first_k_dense_replace and
    # interleave_moe_layer_step.
    assert moe_of("qwen3-30b-a3b") == (128, 8, 0, 768, 0, 1)
    assert moe_of("qwen3-235b-a22b") == (128, 8, 0, 1536, 0, 1)
    assert moe_of("gpt-oss-120b") == (128, 4, 0, 2880, 0, 1)
    assert moe_of("deepseek-r1") == moe_of("deepseek-v3") == (256, 8, 1, 2048, 3, 1)
    assert moe_of("llama-4-scout") == (16, 1, 1, 8192, 0, 1)
    assert moe_of("llama-4-maverick") == (128, 1, 1, 8192, 0, 2)
    assert MODELS["llama-4-maverick"].ffn_size == 16384  # intermediate_size_mlp: the dense layers' FFN
    gpt_oss = MODELS["gpt-oss-120b"]
    assert (gpt_oss.sliding_window_tokens, gpt_oss.sliding_window_layers, gpt_oss.bias) == (128, "alternate", True)


def test_deepseek_r1_is_deepseek_v3s_architecture() -> None:
    r1, v3 = MODELS["deepseek-r1"], MODELS["deepseek-v3"]
    shape = lambda m: m.model_dump(exclude={"slug", "name", "sources", "notes"})  # noqa: E731
    assert shape(r1) == shape(v3)


def test_a_step_that_leaves_no_moe_layer_names_the_field() -> None:
    doc = MODELS["llama-4-maverick"].model_dump()
    doc["moe"]["layer_step"] = 49
    with pytest.raises(ValidationError, match="leaves no MoE layer") as raised:
        ModelCreate(**doc)
    assert [e["loc"] for e in raised.value.errors()] == [("moe", "layer_step")]
