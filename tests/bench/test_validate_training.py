"""`python -m bench.validate_training`: Megatron-LM iteration times of GPT 22 B to 1 T on A100s (Korthikanti et al.,
arXiv 2205.05198, Table 5) against `roofline.estimate_training`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import validate_training


def test_the_command_writes_every_row_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "training.json"
    assert validate_training.main(["--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["hardware"] == "a100-sxm-80gb"
    assert len(doc["rows"]) == 8
    assert set(doc["settings"]) == {"full", "selective"}
    for row in doc["rows"]:
        assert row["predicted_s"] > 0 and row["error"] == pytest.approx(row["predicted_s"] / row["measured_s"] - 1)
    printed = capsys.readouterr().out
    assert "megatron-1t" in printed and "median |error|" in printed


def test_no_row_misses_by_more_than_the_worst_case_target() -> None:
    doc = validate_training.report()
    for name, setting in doc["settings"].items():
        assert setting["worst_abs_error"] <= validate_training.WORST_TARGET, name


def test_missing_data_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert validate_training.main(["--data", str(tmp_path / "nowhere")]) == 2
    assert "validation data not found" in capsys.readouterr().err
