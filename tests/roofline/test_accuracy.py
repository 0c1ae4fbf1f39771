"""Ridgeline's predictions against measured A100 timings stay as accurate as issue 3 left them.

Runs the comparison of `bench/validate.py` (the measured tables in ../shared/validation: aiconfigurator,
vidur and LLMCompass; see that module for sources, licences and timing scopes) and holds each family that reached
the issue's target to a bound just above the error measured when it was reached: a change to the model that makes
those predictions worse fails here.

Without the data the test skips, except under CI (CI=true), where missing data is a failure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import validate
from tests.roofline.validation_data import require

# (source, family): (median, p90 or None) of |predicted / measured − 1|. Measured when set, and the issue's target:
BOUNDS: dict[tuple[str, str], tuple[float, float | None]] = {
    ("aiconfigurator", "gemm"): (0.115, 0.28),  # 10.9 %, 26.2 %; target 12 %, 30 % (bf16)
    ("aiconfigurator", "attention-context"): (0.12, None),  # 11.2 %, 11.6 % with queueing; target 20 %
    # TensorRT-LLM's decode attention: XQA's chain of three loads and its own key split, merged in the same kernel
    # (`roofline._ops.XQA_KV_ROUND_TRIPS`): 20.3 → 19.5 %, p90 58.1 → 53.2 %; target 20 %.
    ("aiconfigurator", "attention-generation"): (0.20, None),
    # Streaming kernels: Little's law and the bandwidth combined (`roofline._kernels.MEMORY_QUEUEING_NORM`), one
    # load per input stream in flight. Rotary and SwiGLU reached the target with it (29.3 → 14.7 %, 24.9 → 8.0 %);
    # rms_norm, the add and the LLMCompass norms lost a little (7.3 → 13.7 %, 8.2 → 9.3 %, 5.4 → 8.4 %, 5.0 → 6.5 %).
    ("vidur", "elementwise"): (0.10, None),  # 9.3 %; target 20 %
    ("vidur", "rmsnorm"): (0.145, None),  # 13.7 % (scalar loads); target 20 %
    ("vidur", "embedding"): (0.075, None),  # 6.9 % (scalar loads after the token id); target 20 %
    ("vidur", "rope"): (0.155, None),  # 14.7 % (a pair of scalar loads); target 20 %
    ("vidur", "activation"): (0.085, None),  # 8.0 % (SwiGLU: gate and up, scalar); target 20 %
    ("llmcompass", "gemm"): (0.07, None),  # 6.5 %; target 12 %
    ("llmcompass", "softmax"): (0.09, None),  # 8.4 %; target 20 %
    # PyTorch's vectorized layer norm (`roofline._ops.LAYERNORM_BLOCK_THREADS`): a block per row, two passes of
    # 4-element loads in series, the second from device memory once the resident rows outgrow L2; LLMCompass's layer
    # norm call hides its kernel under its 52 µs of host work (`bench.validate.Scope.floor_s`).
    ("vidur", "layernorm"): (0.17, None),  # 16.6 % (37.8 % before); target 20 %
    ("llmcompass", "layernorm"): (0.03, None),  # 2.7 % (6.5 % before); target 20 %
    ("llmcompass", "activation"): (0.03, None),  # 2.4 %; target 20 %
}
FAMILIES = {
    "aiconfigurator": {"gemm", "attention-context", "attention-generation"},
    "vidur": {"gemm", "rmsnorm", "layernorm", "rope", "activation", "elementwise", "embedding"},
    "llmcompass": {"gemm", "softmax", "layernorm", "activation"},
}


@pytest.fixture(scope="module")
def data() -> Path:
    return require(validate.data_dir, "accuracy check")


@pytest.fixture(scope="module")
def report(data: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {(row["source"], row["family"]): row for row in validate.report(data)}


def test_every_source_and_family_is_reported(report: dict[tuple[str, str], dict[str, Any]]) -> None:
    assert {(s, f) for s, families in FAMILIES.items() for f in families} == set(report)
    for row in report.values():
        assert row["count"] > 0 and len(row["worst"]) == min(5, row["count"])


@pytest.mark.parametrize(("key", "bound"), list(BOUNDS.items()), ids=["/".join(k) for k in BOUNDS])
def test_accuracy_holds(
    report: dict[tuple[str, str], dict[str, Any]], key: tuple[str, str], bound: tuple[float, float | None]
) -> None:
    row = report[key]
    median, p90 = bound
    assert row["median_ape"] <= median, f"{key}: median error {row['median_ape']:.1%} > {median:.1%}"
    if p90 is not None:
        assert row["p90_ape"] <= p90, f"{key}: p90 error {row['p90_ape']:.1%} > {p90:.1%}"


def test_the_bounds_are_never_looser_than_the_issue() -> None:
    for (source, family), (median, p90) in BOUNDS.items():
        assert median <= (0.12 if family == "gemm" else 0.20), (source, family)
        assert p90 is None or p90 <= 0.30


def test_the_command_writes_the_same_report_as_json(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "accuracy.json"
    assert validate.main(["--data", str(data), "--json", str(out), "--worst", "2"]) == 0
    doc = json.loads(out.read_text())
    assert doc["hardware"] == "a100-sxm-80gb"
    rows = {(r["source"], r["family"]): r for r in doc["families"]}
    assert set(rows) == {(s, f) for s, families in FAMILIES.items() for f in families}
    assert all(len(r["worst"]) <= 2 for r in rows.values())


def test_missing_data_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert validate.main(["--data", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "validation data not found" in err and "nowhere" in err
