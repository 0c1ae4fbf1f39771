"""The one batch evaluator: ops grouped by template into one core call each, in list order, and predictions for
measured ops (collectives on the profile's own fabric) placed back where each op was."""

from __future__ import annotations

import numpy as np
import pytest

import adapters
import roofline
from schemas.benchmarks import Collective, TrainingStep
from schemas.estimates import EstimateContext
from schemas.ops import Attention, Chain, Elementwise, Matmul
from tests.adapters.conftest import A100

HW = adapters.to_core(A100, EstimateContext(hardware=A100.slug))
OPS = [
    Matmul(m=128, n=256, k=64),
    Elementwise(elements=1000),
    Matmul(m=256, n=256, k=64),
    Matmul(m=512, n=256, k=64, epilogue=["relu"]),
    Chain(ops=[Elementwise(elements=10), Elementwise(elements=10)]),
]


def test_ops_that_differ_only_in_sizes_are_one_core_call_in_list_order() -> None:
    batch = adapters.evaluate_ops(HW, OPS)
    assert [g.indices for g in batch.groups] == [[0, 2], [1], [3], [4]]
    plain = batch.groups[0].estimate
    assert plain.flops.tolist() == [2 * 128 * 256 * 64, 2 * 256 * 256 * 64]
    assert batch.groups[0].template is OPS[0] and batch.collectives == []


def test_each_op_gets_what_it_would_get_alone() -> None:
    preds = adapters.predict(HW, OPS)
    for i, op in enumerate(OPS):
        alone = adapters.evaluate(HW, op)
        assert preds.time_s[i] == pytest.approx(alone.time_s, rel=1e-12), op
        assert preds.flops[i] == alone.flops and preds.bytes[i] == alone.bytes


def test_flags_and_kv_heads_split_groups_sizes_do_not() -> None:
    mha = Attention(batch=1, heads=32, head_dim=128, q_len=1, kv_len=1024)
    assert adapters.template_key(mha) == adapters.template_key(mha.model_copy(update={"kv_len": 4096}))
    assert adapters.template_key(mha) != adapters.template_key(mha.model_copy(update={"kv_heads": 8}))
    assert adapters.template_key(OPS[0]) != adapters.template_key(OPS[3])  # the relu epilogue


def test_an_error_names_the_first_op_of_the_first_group_that_fails() -> None:
    ops = [Elementwise(elements=8), Matmul(m=8, n=8, k=8, dtype="fp8"), Elementwise(elements=8), OPS[4]]
    with pytest.raises(adapters.InvalidField) as raised:
        adapters.predict(HW, ops * 2)
    assert raised.value.field == "body.results.1.op.dtype"  # the A100 has no fp8 peak


def test_collectives_are_predicted_on_the_profiles_fabric_when_they_fit() -> None:
    # 2 A100s share the NVSwitch domain (8 devices); 16 need a scale-out fabric the profile does not have.
    ops = [
        Collective(collective="all_reduce", bytes=1 << 20, devices=2),
        OPS[0],
        Collective(collective="all_reduce", bytes=1 << 24, devices=2),
        Collective(collective="all_reduce", bytes=1 << 20, devices=16),
    ]
    preds = adapters.predict(HW, ops, spec=A100)
    direct = roofline.collective(
        "all_reduce", np.array([1 << 20, 1 << 24], dtype=float), adapters.device_topology(A100, 2)
    )
    assert preds.time_s[[0, 2]].tolist() == np.asarray(direct.time_s).tolist()
    assert preds.overhead_s[[0, 2]].tolist() == [0.0, 0.0]  # a collective's latency is what a calibration may learn
    assert preds.bytes[[0, 2]].tolist() == [1 << 20, 1 << 24] and np.isnan(preds.flops[0])
    assert np.isnan(preds.time_s[3]) and np.isnan(preds.bytes[3])
    assert np.isnan(adapters.predict(HW, ops).time_s[0])  # no profile: no collective predictions


def test_a_measured_training_step_is_predicted_by_the_training_core() -> None:
    # The worker's quick step: 2 layers, h 256, 4 heads, FFN 1024, vocabulary 2048, 4 sequences of 128 tokens.
    # GEMM FLOPs by hand: the linear layers' weights, 2 × (4h² + 2hf) + V·h = 2 097 152, × 6 × 512 tokens
    # (Kaplan et al. 2020: forward 2, backward 4) = 6 442 450 944; the attention's QKᵀ and ·V, 2 × 2·b·a·s²·d =
    # 67 108 864 a layer forward, × 3 with the backward, × 2 layers = 402 653 184: 6 845 104 128 in all. The
    # memory-bound ops (norms, GELU, softmax, loss, AdamW) add well under 1 %.
    step = TrainingStep(layers=2, hidden=256, heads=4, ffn=1024, vocab=2048, sequence=128, batch=4)
    hw = roofline.Hardware(
        name="test", units=1, matrix_flops_per_s={"fp32": 1e12}, vector_flops_per_s={"fp32": 1e12},
        memory_bytes_per_s=1e11, memory_capacity_bytes=16e9, launch_s=1e-6, eff_matmul=1.0, eff_vector=1.0,
        eff_memory=1.0,
    )  # fmt: skip
    predicted = adapters.predict(hw, [step])
    assert 6_845_104_128 <= predicted.flops[0] <= 6_845_104_128 * 1.01
    assert predicted.time_s[0] >= 6_845_104_128 / 1e12
    assert "training_step" in adapters.UNCALIBRATED
