"""Calibrations meet core estimates here: what a calibration sees of an op (the same for an op estimate, a stored
result and an inference run's op group), a fitted correction applied to ops, and its notes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter

import adapters
import roofline
from roofline.calibration import Method, fit
from schemas.benchmarks import ResultOp
from schemas.estimates import EstimateContext
from schemas.ops import Matmul
from tests.adapters.conftest import A100

HW = adapters.to_core(A100, EstimateContext(hardware=A100.slug))


@pytest.mark.parametrize(
    ("op", "static", "sizes", "doc"),
    [
        (
            "matmul",
            {"dtype": "bf16", "epilogue": ("gelu",), "fuse_epilogue": True},
            {"m": 1280.0, "n": 3072.0, "k": 768.0, "batch": 1.0},
            {"kind": "matmul", "m": 1280, "n": 3072, "k": 768, "epilogue": ["gelu"]},
        ),
        (
            "attention",
            {"dtype": "fp16", "causal": True, "implementation": "flash"},
            {"batch": 8.0, "heads": 32.0, "kv_heads": 8.0, "head_dim": 128.0, "q_len": 1.0, "kv_len": 4096.0},
            {"kind": "attention", "batch": 8, "heads": 32, "kv_heads": 8, "head_dim": 128, "q_len": 1, "kv_len": 4096,
             "dtype": "fp16"},
        ),
        (
            "layernorm",
            {"dtype": "bf16", "rms": True},
            {"rows": 10.0, "cols": 8192.0},
            {"kind": "rmsnorm", "rows": 10, "cols": 8192},
        ),
        (
            "elementwise",
            {"dtype": "bf16", "inputs": 3.0, "outputs": 1, "flops_per_element": 6.0},
            {"elements": 1e6},
            {"kind": "elementwise", "elements": 1000000, "inputs": 3, "flops_per_element": 6.0},
        ),
        (
            "activation",
            {"dtype": "bf16", "function": "swiglu"},
            {"elements": 4096.0},
            {"kind": "activation", "elements": 4096, "function": "swiglu"},
        ),
        (
            "collective",
            {"collective": "all_reduce", "devices": 4, "dtype": "fp16"},
            {"bytes": 196608.0},
            {"kind": "collective", "collective": "all_reduce", "devices": 4, "bytes": 196608, "dtype": "fp16"},
        ),
    ],
)  # fmt: skip
def test_an_inference_op_group_is_described_as_its_op_estimate(
    op: str, static: dict[str, Any], sizes: dict[str, float], doc: dict[str, Any]
) -> None:
    """The family, variant and features an inference op group gets are exactly those of the same op sent to
    /v1/estimate/op (or uploaded): the one description both calibrations go through."""
    stored = TypeAdapter(ResultOp).dump_python(TypeAdapter(ResultOp).validate_python(doc), mode="json")
    keys, expected, _ = adapters.describe([stored])
    arrays = {name: np.array([value]) for name, value in sizes.items()}
    template = adapters.template_of(op, static, arrays)
    assert template is not None and adapters.group_of(template) == adapters.group_of(stored)
    key, features = adapters.describe_sized(template, arrays, 1)
    assert key == keys[0]
    assert features == pytest.approx(expected)


def test_an_op_no_schema_describes_is_left_to_the_physical_model() -> None:
    assert (
        adapters.template_of("matmul", {"dtype": "fp12", "epilogue": (), "fuse_epilogue": True}, {"m": np.ones(1)})
        is None
    )


def _matmuls(ms: list[int]) -> list[dict[str, Any]]:
    return [Matmul(m=m, n=1024, k=1024).model_dump(mode="json") for m in ms]


def _doubled() -> adapters.Fitted:
    """A calibration fitted on 16 bf16 matmuls measured at exactly twice their modelled work, no fixed cost: the
    parametric part is L = 0, utilisation 2 everywhere, and every residual 0."""
    docs = _matmuls([2**p for p in range(4, 20)])
    keys, features, _ = adapters.describe(docs)
    work = np.geomspace(1e-6, 1e-2, len(docs))
    correction = fit(features, work, 2 * work, adapters.variant_codes(keys, sorted(set(keys))))
    assert correction is not None
    return adapters.Fitted(7, 3, "a100-sxm-80gb", {"matmul/bf16": adapters.FittedGroup(correction, sorted(set(keys)))})


def test_a_fitted_correction_corrects_its_family_and_leaves_the_rest() -> None:
    fitted = _doubled()
    docs = [*_matmuls([4096]), {"kind": "softmax", "rows": 8, "cols": 8, "dtype": "bf16"}, {"kind": "chain"}]
    work, physical = np.array([1e-4, 1e-5, 1e-5]), np.array([1.05e-4, 1.5e-5, 1.5e-5])
    calibrated, method, used = adapters.calibrate_docs([fitted], docs, work, physical)
    assert calibrated[0] == pytest.approx(2e-4, rel=1e-6)
    assert np.isnan(calibrated[1:]).all()  # no softmax correction; a chain has no sizes of its own
    assert method.tolist() == [Method.interpolated, Method.physical, Method.physical]
    assert used.tolist() == [7, 0, 0]
    assert adapters.covering([fitted], "softmax/bf16") is None


def test_an_op_estimate_is_calibrated_before_it_is_rendered() -> None:
    est = adapters.evaluate(HW, Matmul(m=4096, n=1024, k=1024))
    chosen = adapters.Chosen("latest", [_doubled()])
    times, info, each = adapters.calibrate_points(chosen, _matmuls([4096]), est)
    assert times is not None
    assert times[0] == pytest.approx(2 * (est.time_s - est.overhead_s), rel=1e-6)  # no fixed cost once calibrated
    note = adapters.NOTES["interpolated"]
    assert (
        info == each[0] == {"id": 7, "version": 3, "hardware": "a100-sxm-80gb", "method": "interpolated", "note": note}
    )
    calibrated = adapters.calibrated(est, times)
    assert calibrated.time_s == times[0] and calibrated.extra["raw_time_s"] == est.time_s
    assert adapters.item_dicts(calibrated)[0]["details"]["raw_time_s"] == est.time_s


def test_nothing_to_apply_leaves_the_physical_model_and_says_why() -> None:
    note = {"requested": "latest", "method": "physical", "note": "no calibration for 'l4': the physical model"}
    est = adapters.evaluate(HW, Matmul(m=64, n=64, k=64))
    times, info, each = adapters.calibrate_points(adapters.Chosen("latest", [], note), _matmuls([64]), est)
    assert (times, info, each) == (None, note, [note])
    assert adapters.calibrated(est, None).time_s == est.time_s


def test_an_inference_op_group_is_corrected_as_its_op_estimate_would_be() -> None:
    # A decode step's matmul group (`roofline.OpGroup`): the corrector describes it as the op estimate of that shape.
    fitted = _doubled()
    corrector = adapters.RunCorrector([fitted])
    group = _matmul_group(m=np.array([4096.0, 8192.0]), work=np.array([1e-4, 2e-4]))
    corrected = corrector(group)
    assert corrected.time_s.tolist() == pytest.approx([2e-4, 4e-4], rel=1e-6)
    assert corrected.label == "matmul/bf16" and corrector.used == {"matmul/bf16": fitted}
    fp12 = corrector(_matmul_group(m=np.array([64.0]), work=np.array([1e-6]), dtype="fp12"))
    assert fp12.label == "matmul/fp12" and "matmul/fp12" in corrector.undescribed


def _matmul_group(m: Any, work: Any, dtype: str = "bf16") -> roofline.OpGroup:
    """Matmuls of m × 1024 × 1024 as an inference run evaluates them: the core's keyword arguments and a 5 µs launch."""
    static = {"dtype": dtype, "out_dtype": None, "tile": None, "epilogue": (), "fuse_epilogue": True}
    sizes = {"m": m, "n": np.full_like(m, 1024.0), "k": np.full_like(m, 1024.0), "batch": np.ones_like(m)}
    return roofline.OpGroup("matmul", static, sizes, work, work + 5e-6)
