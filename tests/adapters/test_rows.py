"""Core estimates as response items: every op kind's single item rendered by the hot path (Python floats) equals the
column path's (one numpy matrix), key order included; non-finite numbers are named; calibrations per point."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

import adapters
from schemas.estimates import EstimateContext, EstimateRead
from schemas.ops import (
    Activation,
    Attention,
    Chain,
    CrossEntropy,
    Elementwise,
    Embedding,
    LayerNorm,
    Matmul,
    Op,
    Reduction,
    RmsNorm,
    Rotary,
    Softmax,
)
from tests.adapters.conftest import A100

HW = adapters.to_core(A100, EstimateContext(hardware=A100.slug))
EVERY_KIND: list[Op] = [
    Matmul(m=1793, n=1793, k=1793),
    Elementwise(elements=1 << 20, inputs=2, functions=["exp"]),
    Activation(elements=1 << 20, function="gelu"),
    Reduction(rows=4096, cols=4096),
    Softmax(rows=4096, cols=4096),
    LayerNorm(rows=4096, cols=4096),
    RmsNorm(rows=4096, cols=4096, memory_access="scalar"),
    Rotary(tokens=4096, heads=32, head_dim=128),
    Embedding(tokens=4096, hidden=4096, vocab=32000),
    CrossEntropy(tokens=4096, vocab=32000),
    Attention(batch=8, heads=32, kv_heads=8, head_dim=128, q_len=1, kv_len=4096),
    Chain(ops=[Matmul(m=4096, n=4096, k=4096), Activation(elements=4096 * 4096, function="relu")]),
]


def _one(op: Op) -> Any:
    return adapters.with_assumptions(adapters.evaluate(HW, op), HW, "a100-sxm-80gb")


@pytest.mark.parametrize("op", EVERY_KIND, ids=[op.kind for op in EVERY_KIND])
def test_one_item_renders_as_the_column_path_renders_it(op: Op) -> None:
    est = _one(op)
    single = adapters.item_dict(est)
    assert list(single) == list(adapters.item_dicts(est, where=None)[0])
    assert single == adapters.item_dicts(est, where=None)[0]
    assert list(single) == list(EstimateRead.model_fields)
    assert all(type(value) is float for key, value in single.items() if key.endswith("_s"))


def test_an_item_carries_the_estimates_figures() -> None:
    # 1793³ bf16 on 256×128 tiles: ⌈1793/256⌉·⌈1793/128⌉ = 8·15 = 120 tiles on 108 SMs, 2 waves (seed 002).
    item = adapters.item_dict(_one(Matmul(m=1793, n=1793, k=1793, tile=(256, 128))))
    assert (item["tiles"], item["waves"], item["tile"]) == (120.0, 2.0, [256, 128])
    assert item["flops"] == 2 * 1793**3 and item["bytes"] == 2 * 3 * 1793**2
    assert item["achieved_flops_per_s"] == item["flops"] / item["time_s"]
    assumed = item["assumptions"]
    assert (assumed["hardware"], assumed["launch_overhead_s"], assumed["calibration"]) == (
        "a100-sxm-80gb",
        5e-6,
        "none",
    )
    assert assumed["efficiency"] == {"matmul": 0.87, "vector": 0.80, "memory": 0.90}
    assert adapters.item_dict(_one(Elementwise(elements=8)))["tile"] is None


def test_no_bytes_is_an_unbounded_intensity_json_can_carry() -> None:
    est = dataclasses.replace(_one(Elementwise(elements=8)), bytes=0.0)
    assert adapters.item_dict(est)["arithmetic_intensity"] == 1e300


def test_a_non_finite_number_is_named_by_its_place_among_the_items() -> None:
    est = adapters.evaluate(HW, Matmul(m=1, n=64, k=64), {"m": np.array([1.0, 2.0, 3.0])}, points=3)
    time_s = np.array(est.time_s, copy=True)
    time_s[1] = math.inf
    broken = dataclasses.replace(est, time_s=time_s)
    with pytest.raises(adapters.InvalidField) as raised:
        adapters.item_dicts(broken, positions=[4, 7, 9])
    assert (raised.value.field, raised.value.kind) == ("response.items.7.time_s", "non_finite_result")
    with pytest.raises(adapters.InvalidField) as raised:
        adapters.item_dict(dataclasses.replace(_one(Elementwise(elements=8)), time_s=math.nan))
    assert raised.value.field == "response.time_s"


def test_each_point_can_carry_its_own_calibration_note() -> None:
    est = adapters.with_assumptions(
        adapters.evaluate(HW, Matmul(m=1, n=64, k=64), {"m": np.array([1.0, 2.0])}, points=2), HW, "a100"
    )
    items = adapters.item_dicts(est, calibration=[{"method": "fitted"}, {"method": "physical"}])
    assert [item["assumptions"]["calibration"] for item in items] == [{"method": "fitted"}, {"method": "physical"}]
    assert list(items[0]["assumptions"]) == list(est.assumptions)  # the same keys, in the same order
