"""fp32 matmuls at a precision (`roofline.matmul_rate`): the rate each device gives them, from the framework rules
(JAX 0.10.2 `jax.lax.Precision`) and the catalogue's peaks, typed by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

import roofline
from tests.roofline.profiles import A100, H100

# A TPU-like and an MI355X-like profile: only what the rate needs.
TPU = replace(
    H100, name="TPU-like", kind="tpu", matrix_flops_per_s={"bf16": 918e12}, vector_flops_per_s={"fp32": 3.6e12}
)
MI355X = replace(
    H100,
    name="MI355X-like",
    matrix_flops_per_s={"fp32": 157.3e12, "bf16": 2516.6e12},
    vector_flops_per_s={"fp32": 157.3e12},
)
V100 = replace(H100, name="V100-like", matrix_flops_per_s={"fp16": 125e12}, vector_flops_per_s={"fp32": 15.7e12})
CPU = replace(H100, name="CPU-like", kind="cpu", matrix_flops_per_s={"fp32": 768e9}, vector_flops_per_s={"fp32": 768e9})


@pytest.mark.parametrize(
    ("hw", "precision", "rate", "unit", "algorithm"),
    [
        # GPUs: JAX's DEFAULT is TF32 where the tensor cores have it (H100 494.5 TF dense), HIGHEST full fp32 on the
        # CUDA cores (tensor cores take no fp32 operands): the 67 TF vector rate; bf16x3 is three bf16 products.
        (H100, "default", 494.5e12, "matrix", "tf32"),
        (H100, "tf32", 494.5e12, "matrix", "tf32"),
        (H100, "highest", 67e12, "vector", "fp32"),
        (H100, "bf16x3", 989e12 / 3, "matrix", "bf16x3"),
        (A100, "default", 156e12, "matrix", "tf32"),
        # No TF32 on the device: DEFAULT is plain fp32, on the fp32 matrix unit where it has one (CDNA 4).
        (MI355X, "default", 157.3e12, "matrix", "fp32"),
        (MI355X, "highest", 157.3e12, "matrix", "fp32"),
        (V100, "default", 15.7e12, "vector", "fp32"),
        # TPU: DEFAULT one bf16 pass, bf16x3 (JAX's HIGH) three, HIGHEST six.
        (TPU, "default", 918e12, "matrix", "bf16"),
        (TPU, "bf16x3", 918e12 / 3, "matrix", "bf16x3"),
        (TPU, "highest", 918e12 / 6, "matrix", "bf16x6"),
        # CPU: precision has no effect on CPU backends.
        (CPU, "default", 768e9, "matrix", "fp32"),
    ],
)
def test_the_rate_of_an_fp32_matmul_at_each_precision(
    hw: roofline.Hardware, precision: str, rate: float, unit: str, algorithm: str
) -> None:
    got = roofline.matmul_rate(hw, "fp32", precision)
    assert got[0] == pytest.approx(rate, rel=1e-12) and got[1:] == (unit, algorithm)


def test_precision_changes_only_fp32_inputs() -> None:
    for precision in ("default", "tf32", "bf16x3", "highest"):
        assert roofline.matmul_rate(H100, "bf16", precision) == (989e12, "matrix", "bf16")


def test_a_rate_the_device_lacks_is_an_error_that_says_so() -> None:
    with pytest.raises(ValueError, match="no tf32 matrix rate"):
        roofline.matmul_rate(V100, "fp32", "tf32")
    with pytest.raises(ValueError, match="no bf16 matrix rate"):
        roofline.matmul_rate(V100, "fp32", "bf16x3")
    with pytest.raises(ValueError, match="unknown matmul precision 'high'"):
        roofline.matmul_rate(H100, "fp32", "high")


def test_an_fp32_matmul_on_an_h100_costs_its_flops_at_the_precisions_rate() -> None:
    """8192³ fp32 on an H100: 2·8192³ = 1.0995e12 FLOPs, 128×128-or-larger tiles in full waves, so its math time is
    the FLOPs at the rate × matmul efficiency, within the last wave's quantisation (≤ 1 wave of 132 slots)."""
    flops = 2.0 * 8192**3
    times = {}
    for precision in ("default", "highest", "bf16x3"):
        est = roofline.single(
            roofline.matmul(H100, 8192, 8192, 8192, dtype="fp32", precision=precision), H100, 67e12, 0.0
        )
        assert est.flops == flops and est.assumptions["algorithm"] == {"default": "tf32", "highest": "fp32"}.get(
            precision, precision
        )
        times[precision] = est.compute_s
    # The math times stand in the ratio of the rates: TF32 494.5, bf16x3 329.7, fp32 67 TF.
    assert times["highest"] / times["default"] == pytest.approx(494.5 / 67, rel=0.02)
    assert times["bf16x3"] / times["default"] == pytest.approx(494.5 / (989 / 3), rel=0.02)
    assert times["default"] >= flops / (494.5e12 * H100.eff_matmul)
