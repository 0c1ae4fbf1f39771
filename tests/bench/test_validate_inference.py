"""`python -m bench.validate_inference`: a GPT-3 175B layer on 4 A100s (LLMCompass), op by op. Every op's error is
held by tests/bench/test_report.py; here, the target that is a property: the layer within 20 % in both phases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import validate_inference

OPS = [op for op, _ in validate_inference.OPS]


@pytest.mark.parametrize("mode", ["shipped", "calibrated"])
def test_every_op_of_both_phases_is_reported(fresh: dict[str, Any], mode: str) -> None:
    keys = {k for k in fresh["inference"] if k.startswith(mode + "/")}
    assert keys == {f"{mode}/{phase}/{op}" for phase in ("prefill", "decode") for op in [*OPS, "layer"]}


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_the_layer_is_within_20_percent(fresh: dict[str, Any], phase: str) -> None:
    error = fresh["inference"][f"shipped/{phase}/layer"]["error"]
    assert abs(error) <= validate_inference.TARGET == 0.20, f"{phase} layer: {error:+.1%}"


def test_the_command_writes_the_report_as_json(tmp_path: Path) -> None:
    out = tmp_path / "inference.json"
    assert validate_inference.main(["--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["model"] == "gpt3-175b" and doc["hardware"] == "a100-sxm-80gb"
    assert [o["op"] for o in doc["phases"]["decode"]["ops"]] == OPS


def test_missing_data_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert validate_inference.main(["--data", str(tmp_path / "nowhere")]) == 2
    assert "validation data not found" in capsys.readouterr().err
