"""Ops as calls of the core, by hand on the A100 profile: FLOPs and bytes of a matrix product, a grid in item order,
and errors that name the field a client wrote."""

from __future__ import annotations

import numpy as np
import pytest

import adapters
import roofline
from schemas.estimates import EstimateContext
from schemas.ops import Attention, Chain, Elementwise, Matmul
from tests.adapters.conftest import A100

HW = adapters.to_core(A100, EstimateContext(hardware=A100.slug))


def test_a_matmul_is_the_cores_matmul_of_its_fields() -> None:
    # FLOPs 2·m·n·k; bytes size(bf16)·(m·k + k·n + m·n) = 2·3·4096², each operand read or written once.
    est = adapters.evaluate(HW, Matmul(m=4096, n=4096, k=4096))
    assert est.flops == 2 * 4096**3
    assert est.bytes == 2 * 3 * 4096**2
    assert est.unit == "matrix" and est.peak_flops_per_s == 312e12
    direct = roofline.single(roofline.matmul(HW, 4096, 4096, 4096), HW, HW.vector_peak("bf16"), HW.launch_s)
    assert est.time_s == direct.time_s


def test_a_dtype_without_a_peak_names_the_ops_dtype_field() -> None:
    with pytest.raises(adapters.InvalidField) as raised:
        adapters.evaluate(HW, Matmul(m=8, n=8, k=8, dtype="fp8"), where="body.ops.3")
    assert raised.value.field == "body.ops.3.dtype"
    assert "no fp8 peak" in raised.value.message


def test_an_error_inside_a_chain_names_the_chained_op() -> None:
    chain = Chain(ops=[Elementwise(elements=10), Matmul(m=8, n=8, k=8, dtype="fp8")])
    with pytest.raises(adapters.InvalidField) as raised:
        adapters.evaluate(HW, chain)
    assert raised.value.field == "body.op.ops.1.dtype"


def test_a_field_that_moves_only_bytes_still_gives_one_point_per_value() -> None:
    # 1000 bf16 elements, 1 output, 1 to 3 inputs: (inputs + 1) · 1000 · 2 bytes, the same 1000 FLOPs at every point.
    inputs = np.array([1.0, 2.0, 3.0])
    est = adapters.evaluate(HW, Elementwise(elements=1000), {"inputs": inputs}, points=3)
    assert est.bytes.tolist() == [4000.0, 6000.0, 8000.0]
    assert np.shape(est.time_s) == (3,) and np.shape(est.flops) == (3,)


def test_a_sweep_is_the_cartesian_grid_first_field_slowest() -> None:
    est, grid = adapters.sweep(HW, Matmul(m=1, n=1, k=64), {"m": [1, 2], "n": [3, 4, 5]})
    assert grid == {"m": [1.0, 1.0, 1.0, 2.0, 2.0, 2.0], "n": [3.0, 4.0, 5.0, 3.0, 4.0, 5.0]}
    assert est.flops.tolist() == [2 * m * n * 64 for m, n in zip(grid["m"], grid["n"], strict=True)]


def test_what_a_sweep_cannot_vary_is_named() -> None:
    with pytest.raises(adapters.InvalidField) as raised:
        adapters.check_sweep(Chain(ops=[Elementwise(elements=10)]), {"elements": [1.0]})
    assert raised.value.field == "body.sweep.op.kind"
    with pytest.raises(adapters.InvalidField) as raised:
        adapters.check_sweep(Matmul(m=1, n=1, k=1), {"dtype": [1.0]})
    assert (raised.value.field, raised.value.message) == ("body.sweep.vary.dtype", "not a numeric field of a matmul op")
    adapters.check_sweep(Attention(batch=1, heads=8, head_dim=64, q_len=1, kv_len=8), {"kv_heads": [1.0, 2.0]})


def test_attentions_cross_field_rules_hold_at_every_grid_point() -> None:
    # 12 KV heads do not divide 32 query heads: the second point of the grid, named by the varied field.
    op = Attention(batch=1, heads=32, head_dim=128, q_len=1, kv_len=1024)
    with pytest.raises(adapters.InvalidField) as raised:
        adapters.sweep(HW, op, {"kv_heads": [8, 12]})
    assert raised.value.field == "body.sweep.vary.kv_heads"
    assert raised.value.message == "kv_heads must divide heads (point 1: heads 32, kv_heads 12)"
    with pytest.raises(adapters.InvalidField) as raised:
        adapters.sweep(HW, op, {"q_len": [1, 2048]})
    assert raised.value.field == "body.sweep.vary.q_len"


def test_the_op_of_every_sweep_point_as_json() -> None:
    docs = adapters.sweep_docs(Matmul(m=1, n=8, k=8), {"m": [16.0, 32.0]})
    assert [d["m"] for d in docs] == [16.0, 32.0]
    assert all(d["kind"] == "matmul" and d["n"] == 8 and d["dtype"] == "bf16" for d in docs)


def test_an_attentions_kv_heads_is_part_of_its_variant_not_a_size() -> None:
    # MHA, GQA and MQA run different kernels: ops with other kv_heads are never evaluated, or calibrated, as one.
    sizes, optional, others = adapters.size_fields(Attention)
    assert sizes == ("batch", "heads", "head_dim", "q_len", "kv_len")
    assert optional == ()
    # A sliding window, likewise: a windowed op walks another schedule (its band), so it is a variant too.
    assert others == ("kind", "kv_heads", "causal", "implementation", "dtype", "window")
