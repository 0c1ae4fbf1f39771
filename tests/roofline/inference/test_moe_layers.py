"""Which layers are MoE layers (`roofline.Moe`: leading dense layers, then every `layer_step`-th layer) and what
follows for parameters, weights and the op list; numbers worked out by hand from the models' configs
(hardware_db/models/llama-4-maverick.yaml, gpt-oss-120b.yaml, deepseek-v3.yaml)."""

from __future__ import annotations

import numpy as np
import pytest

import roofline
import roofline.inference as inf
from tests.roofline.inference import rows
from tests.roofline.models import MODELS
from tests.roofline.profiles import system


def test_the_step_counts_every_nth_layer_from_one_past_the_dense_ones() -> None:
    every_other = roofline.Moe(experts=8, top_k=1, expert_ffn=64, layer_step=2)
    assert every_other.is_moe_layer(np.arange(6)).tolist() == [False, True, False, True, False, True]
    assert every_other.moe_layers(48) == 24 and every_other.moe_layers(7) == 3
    # Three leading dense layers, then every other layer of 10: layers 3, 5, 7 and 9 (10 // 2 − 3 // 2 = 4).
    mixed = roofline.Moe(experts=8, top_k=1, expert_ffn=64, dense_layers=3, layer_step=2)
    assert np.flatnonzero(mixed.is_moe_layer(np.arange(10))).tolist() == [3, 5, 7, 9]
    assert mixed.moe_layers(10) == 4
    deepseek = MODELS["deepseek-v3"].moe
    assert deepseek is not None and deepseek.moe_layers(61) == 58  # first_k_dense_replace 3
    assert roofline.Moe(experts=8, top_k=1, expert_ffn=64, dense_layers=70).moe_layers(61) == 0


def test_maverick_counts_24_moe_and_24_dense_layers() -> None:
    model = MODELS["llama-4-maverick"]
    d, layers, vocab = 5120, 48, 202048
    attention = d * (40 + 2 * 8) * 128 + 40 * 128 * d  # QKV and output projections
    expert = 3 * d * 8192  # gate, up, down of one expert (intermediate_size)
    moe_layer = 128 * expert + 1 * expert + d * 128  # routed, shared, router
    dense_layer = 3 * d * 16384  # intermediate_size_mlp
    tables, norms = 2 * vocab * d, (2 * layers + 1) * d
    assert (attention, moe_layer, dense_layer) == (62_914_560, 16_232_611_840, 251_658_240)
    total = layers * attention + 24 * moe_layer + 24 * dense_layer + tables + norms
    assert total == 400_711_848_960  # the model card's 400B (the text decoder only)
    params = inf.parameter_count(model)
    assert params.total == total
    assert params.ffn == 24 * moe_layer + 24 * dense_layer
    assert params.active_per_token == total - 24 * 127 * expert == 17_184_691_200  # the card's 17B active
    run = inf.InferenceRun(model, system("h200-sxm"), inf.Workload.uniform(4, 256, 2), inf.Parallelism(pipeline=2))
    est = inf.estimate_inference(run)
    # Two stages of 24 layers, each 12 dense and 12 MoE (layers 1, 3, … of each half); the first stage holds the
    # embedding, the last the final norm and the LM head: the larger is the last by the final norm.
    stage = 24 * attention + 12 * moe_layer + 12 * dense_layer + 2 * 24 * d + vocab * d
    assert est.memory.weights_bytes == 2 * (stage + d)
    one = inf.estimate_inference(inf.InferenceRun(model, system("h200-sxm"), inf.Workload.uniform(4, 256, 2)))
    decode = rows(one.decode)
    assert decode["qkv_projection"].calls == 48
    for name in ("ffn_up", "ffn_down", "router", "experts", "shared_experts_up", "experts_combine"):
        assert decode[name].calls == 24, name
    # One decode step of 4 tokens through a dense layer: 2·4·16384·5120 FLOPs in the down projection.
    assert decode["ffn_down"].flops == pytest.approx(24 * 2 * 4 * 16384 * d, rel=1e-3)


def test_a_model_with_no_dense_layer_has_no_dense_ffn() -> None:
    model = MODELS["gpt-oss-120b"]
    est = inf.estimate_inference(inf.InferenceRun(model, system("h100-sxm"), inf.Workload.uniform(2, 64, 2)))
    decode = rows(est.decode)
    assert "ffn_up" not in decode and decode["experts"].calls == 36


def test_gpt_oss_120b_parameters_and_its_alternating_window() -> None:
    model = MODELS["gpt-oss-120b"]
    d, layers, vocab = 2880, 36, 201088
    qkv = (64 + 2 * 8) * 64
    attention = d * qkv + 64 * 64 * d + qkv + d  # with the Q, K, V and output biases
    expert = 3 * d * 2880 + 2 * 2880 + d  # gate, up, down and their biases
    moe_layer = 128 * expert + d * 128  # the router (its 128 biases are not counted)
    tables, norms = 2 * vocab * d, (2 * layers + 1) * d
    total = layers * (attention + moe_layer) + tables + norms
    assert total == 116_829_149_760  # OpenAI's model card, Table 1: 116.83B
    params = inf.parameter_count(model)
    assert params.total == total
    assert params.active_per_token == total - layers * 124 * expert == 5_711_976_000
    # OpenAI's 5.13B active leaves the input embedding table out.
    assert round((params.active_per_token - vocab * d) / 1e9, 2) == 5.13
    est = inf.estimate_inference(inf.InferenceRun(model, system("h100-sxm"), inf.Workload.uniform(1, 2000, 97)))
    per_token = 2 * 8 * 64 * 2  # K and V, 8 KV heads of 64, bf16
    assert est.memory.kv_cache_bytes == (18 * 2096 + 18 * 128) * per_token  # 18 full and 18 windowed layers
