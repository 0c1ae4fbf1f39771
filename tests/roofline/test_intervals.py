"""Prediction intervals (`roofline.intervals`): the quantile arithmetic on tiny residual sets worked by hand, the
interval always holding the estimate, the regimes and the fallback from a thin cell to its pooled bands."""

from __future__ import annotations

import numpy as np
import pytest

from roofline.intervals import (
    ANY,
    LARGE_MESSAGE_BYTES,
    MIN_DEVICES,
    MIN_ROWS,
    Band,
    IntervalTable,
    band_of,
    collective_regime,
    family,
    regime,
    weighted_quantiles,
)


def test_equal_weights_put_each_value_at_the_middle_of_its_share() -> None:
    """Five values sit at (i − ½)/5 = 0.1, 0.3, 0.5, 0.7, 0.9: the 10th and 90th percentiles are the first and last;
    four values [0.5, 1, 2, 4] sit at 0.125, 0.375, …: the 25th percentile is halfway from 0.5 to 1 = 0.75."""
    assert weighted_quantiles([1.1, 0.8, 1.5, 1.0, 0.9], [1] * 5, [0.1, 0.5, 0.9]).tolist() == [0.8, 1.0, 1.5]
    assert weighted_quantiles([0.5, 1.0, 2.0, 4.0], [1] * 4, [0.25, 0.05, 0.95]).tolist() == [0.75, 0.5, 4.0]
    values = np.array([0.3, 2.0, 0.9, 1.7, 1.2, 0.4, 1.1])
    expected = np.percentile(values, [10, 90], method="hazen")  # the same convention, named
    assert weighted_quantiles(values, np.ones(7), [0.1, 0.9]) == pytest.approx(expected, rel=1e-12)


def test_every_device_weighs_the_same() -> None:
    """Device a's rows 1.0 and 1.2 weigh ¼ each, device b's 2.0 weighs ½: cumulative 0.25, 0.5, 1.0, midpoints
    0.125, 0.375, 0.75. The median is 1.2 + (0.5 − 0.375) / (0.75 − 0.375) · (2.0 − 1.2) = 1.4667; p10 is 1.0 and
    p90 2.0 (beyond the first and last midpoints)."""
    band = band_of(np.array([1.0, 2.0, 1.2]), np.array(["a", "b", "a"]))
    assert (band.low, band.high, band.rows, band.devices) == (1.0, 2.0, 3, 2)
    assert weighted_quantiles([1.0, 2.0, 1.2], [0.25, 0.5, 0.25], [0.5])[0] == pytest.approx(1.2 + 0.8 / 3)


def test_the_interval_always_holds_the_estimate() -> None:
    """A model that is always too fast (measured 1.1-1.5 × predicted) gives [t, 1.5 t], not [1.1 t, 1.5 t]; one
    always too slow [0.5 t, t]."""
    assert Band(1.1, 1.5, 100).bounds(2.0) == (2.0, 3.0)
    assert Band(0.5, 0.9, 100).bounds(2.0) == (1.0, 2.0)
    assert Band(0.8, 1.25, 100).bounds(4.0) == (3.2, 5.0)


def test_regime_is_small_work_else_the_larger_of_math_and_memory() -> None:
    assert regime(12e-6, 5e-6, 6e-6, 1e-6) == "small"  # 7 µs of work, under 10 µs
    assert regime(30e-6, 5e-6, 25e-6, 10e-6) == "compute"
    assert regime(30e-6, 5e-6, 10e-6, 25e-6) == "memory"
    got = regime(np.array([12e-6, 30e-6]), 5e-6, np.array([6e-6, 1e-6]), np.array([1e-6, 25e-6]))
    assert got.tolist() == ["small", "memory"]


def test_a_thin_cell_falls_back_to_its_family_then_its_regime() -> None:
    table = IntervalTable({
        "matmul/small": Band(0.5, 2.0, MIN_ROWS - 1, MIN_DEVICES),
        "matmul/*": Band(0.8, 1.2, MIN_ROWS, MIN_DEVICES),
        "matmul/compute": Band(0.9, 1.1, MIN_ROWS, MIN_DEVICES),
        "*/memory": Band(0.7, 1.3, 1000),
        "*/*": Band(0.6, 1.4, 5000),
    })  # fmt: skip
    assert table.band("matmul", "compute") == ("matmul/compute", Band(0.9, 1.1, MIN_ROWS, MIN_DEVICES))
    assert table.band("matmul", "small")[0] == "matmul/*"
    assert table.band("reduction", "memory")[0] == "*/memory"
    assert table.band("reduction", "small")[0] == "*/*"
    assert IntervalTable.from_json(table.to_json()) == table


def test_a_band_from_fewer_than_three_devices_is_widened_to_its_regimes_pooled_band() -> None:
    """Two devices cannot say where a third falls: their band takes the wider bounds of its own and of the regime's
    band over every family; a band of three devices stands as measured."""
    table = IntervalTable({
        "gemm-fp4/compute": Band(0.9, 1.1, MIN_ROWS, devices=2),
        "matmul/compute": Band(0.95, 1.05, MIN_ROWS, devices=MIN_DEVICES),
        "*/compute": Band(0.7, 1.05, 1000, devices=5),
        "*/*": Band(0.6, 1.4, 5000, devices=5),
    })  # fmt: skip
    assert table.band("gemm-fp4", "compute") == ("gemm-fp4/compute+*/compute", Band(0.7, 1.1, MIN_ROWS, 2))
    assert table.band("matmul", "compute") == ("matmul/compute", Band(0.95, 1.05, MIN_ROWS, MIN_DEVICES))
    assert table.band("gemm-fp4", "memory")[0] == "*/*"


def test_a_wider_level_takes_wider_quantiles_and_the_table_keeps_it() -> None:
    """Twenty values 1, 2, …, 20 sit at (i − ½)/20: the 10th percentile is 2.5 (between 2 at 0.075 and 3 at 0.125),
    the 5th 1.5 (between 1 at 0.025 and 2 at 0.075), the 95th 19.5. A table's levels go to JSON and back."""
    values, devices = np.arange(1.0, 21.0), np.array(["a"] * 20)
    assert (band_of(values, devices).low, band_of(values, devices).high) == (2.5, 18.5)
    wider = band_of(values, devices, 0.05)
    assert (wider.low, wider.high) == (pytest.approx(1.5, rel=1e-12), pytest.approx(19.5, rel=1e-12))
    table = IntervalTable({"*/*": Band(0.5, 2.0, 60, 3)}, "test", {"matmul": 0.06})
    assert IntervalTable.from_json(table.to_json()) == table


def test_an_op_takes_the_family_its_validation_rows_were_grouped_by() -> None:
    assert family("matmul") == "matmul" and family("matmul", "fp16") == "matmul"
    assert family("matmul", "fp8") == family("matmul", "bf16", "fp8_tensor") == "gemm-fp8"
    assert family("matmul", "fp4") == family("matmul", "bf16", "nvfp4") == "gemm-fp4"
    assert family("matmul", "bf16", "fp8_block") == "gemm-fp8-block"
    assert family("matmul", "fp32") == "gemm-fp32"
    assert family("attention") == "attention-prefill" and family("attention", decode=True) == "attention-decode"
    assert family("moe") == "moe" and family("rmsnorm") == "rmsnorm"
    assert family("cross_entropy") == ANY  # no rows of its own: its regime's pooled band


def test_factors_give_each_point_its_cells_band_clipped_to_hold_the_estimate() -> None:
    t = IntervalTable({
        "matmul/compute": Band(0.9, 1.2, MIN_ROWS, MIN_DEVICES),
        "matmul/memory": Band(1.05, 1.4, MIN_ROWS, MIN_DEVICES),  # wholly above 1: p10 = t
        f"{ANY}/small": Band(0.5, 3.0, MIN_ROWS, MIN_DEVICES),
        f"{ANY}/{ANY}": Band(0.7, 1.6, MIN_ROWS, MIN_DEVICES),
    })  # fmt: skip
    low, high = t.factors(["matmul", "matmul", "softmax", "softmax"], ["compute", "memory", "small", "memory"])
    assert low.tolist() == [0.9, 1.0, 0.5, 0.7]
    assert high.tolist() == [1.2, 1.4, 3.0, 1.6]
    low, high = t.factors("matmul", np.array(["compute", "compute"]))  # a family broadcast over the points
    assert low.tolist() == [0.9, 0.9] and high.tolist() == [1.2, 1.2]


def test_a_collectives_regime_is_its_fabric_class_and_message_size() -> None:
    assert LARGE_MESSAGE_BYTES == 2**20  # issue 21's NCCL target counts messages of 1 MiB and more
    assert collective_regime(2.0**20 - 1, "scale_up") == "scale_up-latency"
    assert collective_regime(2.0**20, "host") == "host-bandwidth"
    assert collective_regime(np.array([1e3, 1e9]), "scale_out").tolist() == ["scale_out-latency", "scale_out-bandwidth"]
    assert family("collective") == "collective"
