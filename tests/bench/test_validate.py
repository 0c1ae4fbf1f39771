"""`python -m bench.validate`: op families against the measured tables (figures held by tests/bench/test_report.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import validate

FAMILIES = {
    "aiconfigurator": {"gemm", "attention-context", "attention-generation"},
    "vidur": {"gemm", "rmsnorm", "layernorm", "rope", "activation", "elementwise", "embedding"},
    "llmcompass": {"gemm", "softmax", "layernorm", "activation"},
}


def test_every_source_and_family_is_reported(fresh: dict[str, Any]) -> None:
    assert {(r["source"], r["family"]) for r in fresh["ops"].values()} == {
        (s, f) for s, families in FAMILIES.items() for f in families
    }
    assert all(r["count"] > 0 and len(r["worst"]) == min(3, r["count"]) for r in fresh["ops"].values())


def test_the_command_writes_the_report_as_json(tmp_path: Path) -> None:
    out = tmp_path / "accuracy.json"
    assert validate.main(["--json", str(out), "--worst", "2"]) == 0
    doc = json.loads(out.read_text())
    assert doc["hardware"] == "a100-sxm-80gb"
    rows = {(r["source"], r["family"]): r for r in doc["families"]}
    assert set(rows) == {(s, f) for s, families in FAMILIES.items() for f in families}
    assert all(len(r["worst"]) <= 2 for r in rows.values())


def test_missing_data_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert validate.main(["--data", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "validation data not found" in err and "nowhere" in err
