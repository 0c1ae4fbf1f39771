"""The inference model against LLMCompass's GPT-3 175B layer measured on 4×A100 at TP4 stays as accurate as it is.

Runs `bench/validate_inference.py` (data: ../shared/validation/llmcompass-a100, PrincetonUniversity/LLMCompass
@2e015fd2, BSD-3-Clause; see that module for the timing scope) and holds the figures reached: the layer within the
issue's 20 % in both phases, each op that reached 20 % to a bound just above its error, and the ops that miss to
their measured error (so they cannot quietly get worse either). Without the data the test skips, except under CI
(CI=true), where missing data is a failure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import validate_inference
from service.benchmarks.datasets import data_dir
from tests.roofline.validation_data import require

# (phase, op): the largest |predicted / measured − 1| allowed; measured 2026-11-22 with shipped defaults.
BOUNDS: dict[tuple[str, str], float] = {
    # Q_K_V: three separate [m, d] × [d, d/tp] calls, as LLMCompass times them (bench.validate_inference
    # SEPARATE_QKV_CALLS); decode was −30.8 % against the fused GEMM.
    ("prefill", "Q_K_V"): 0.05,  # +2.2 %
    ("decode", "Q_K_V"): 0.05,  # −2.5 %
    ("prefill", "Q_mul_K"): 0.08,  # +5.4 %
    ("prefill", "A_mul_V"): 0.07,  # −4.3 %
    ("prefill", "Wo_proj"): 0.10,  # +7.5 %
    ("prefill", "W1_proj"): 0.09,  # +6.4 %
    ("prefill", "W2_proj"): 0.09,  # +6.3 %
    ("prefill", "GeLU"): 0.05,  # −2.4 % (−7.0 % before streaming kernels queued at the bandwidth)
    ("prefill", "AllReduce_MHA"): 0.13,  # −10.2 %
    ("prefill", "AllReduce_FFN"): 0.13,  # −10.2 %
    ("decode", "Q_mul_K"): 0.20,  # −18.7 %
    ("decode", "Wo_proj"): 0.20,  # −18.9 %
    ("decode", "W1_proj"): 0.04,  # −1.1 %
    ("decode", "W2_proj"): 0.04,  # −1.1 %
    ("decode", "Softmax"): 0.14,  # −11.2 %
    # PyTorch's layer norm: 12 288-wide rows of the resident blocks outgrow L2, so the second pass reads device
    # memory again (was −24.2 %); the decode call's kernel runs under its host time (bench/validate.py, floor_s).
    ("prefill", "LayerNorm_MHA"): 0.20,  # +18.6 %
    ("prefill", "LayerNorm_FFN"): 0.20,  # +18.6 %
    ("decode", "LayerNorm_MHA"): 0.09,  # +8.2 %
    ("decode", "LayerNorm_FFN"): 0.09,  # +8.2 %
    ("decode", "GeLU"): 0.03,  # −0.6 %
}
# Ops that miss the 20 % target (see the README's accuracy section for why), held at their measured error.
MISSES: dict[tuple[str, str], float] = {
    # +33.2 % (+26.3 % before streaming kernels queued at the bandwidth): the three-read block softmax model; the
    # measured 2048-wide rows run as if one of the three reads hit on-chip cache (README, accuracy).
    ("prefill", "Softmax"): 0.34,
    ("decode", "A_mul_V"): 0.51,  # −49.2 %: a 192-batch 1 × 2048 × 128 bmm in two waves of CTAs
    ("decode", "AllReduce_MHA"): 0.54,  # −51.9 %: a 196 KB NCCL all-reduce, collective model
    ("decode", "AllReduce_FFN"): 0.54,
}
LAYER: dict[str, float] = {"prefill": 0.06, "decode": 0.19}  # +3.9 %, −17.2 %


@pytest.fixture(scope="module")
def data() -> Path:
    return require(data_dir, "inference accuracy check")


@pytest.fixture(scope="module")
def report(data: Path) -> dict[str, Any]:
    return validate_inference.report(data)


def test_every_op_is_held(report: dict[str, Any]) -> None:
    ops = {(phase, o["op"]) for phase, body in report["phases"].items() for o in body["ops"]}
    assert ops == set(BOUNDS) | set(MISSES)
    assert not set(BOUNDS) & set(MISSES)
    assert all(bound <= 0.20 for bound in BOUNDS.values())


@pytest.mark.parametrize(("key", "bound"), list({**BOUNDS, **MISSES}.items()), ids=lambda v: str(v))
def test_op_accuracy_holds(report: dict[str, Any], key: tuple[str, str], bound: float) -> None:
    phase, op = key
    row = next(o for o in report["phases"][phase]["ops"] if o["op"] == op)
    assert abs(row["error"]) <= bound, f"{phase} {op}: {row['error']:+.1%} (bound {bound:.0%})"


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_the_layer_is_within_20_percent(report: dict[str, Any], phase: str) -> None:
    error = report["phases"][phase]["layer"]["error"]
    assert abs(error) <= LAYER[phase] <= 0.20, f"{phase} layer: {error:+.1%}"


def test_the_command_writes_the_report_as_json(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "inference.json"
    assert validate_inference.main(["--data", str(data), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["model"] == "gpt3-175b" and doc["hardware"] == "a100-sxm-80gb"
    assert [o["op"] for o in doc["phases"]["decode"]["ops"]][:3] == ["Q_K_V", "Q_mul_K", "A_mul_V"]


def test_missing_data_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert validate_inference.main(["--data", str(tmp_path / "nowhere")]) == 2
    assert "validation data not found" in capsys.readouterr().err
