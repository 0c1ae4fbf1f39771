"""The hardware profile contract: what loading and the API must reject."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from pydantic import ValidationError

from hardware_db import load_yaml
from hardware_db._loader import HARDWARE_DIR
from schemas.hardware import HardwareCreate, numeric_leaves, source_for


@pytest.fixture
def h100() -> dict[str, Any]:
    return load_yaml(HARDWARE_DIR / "h100-sxm.yaml")


def _errors(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as info:
        HardwareCreate.model_validate(doc)
    return [".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in info.value.errors()]


def test_the_example_profile_is_valid(h100: dict[str, Any]) -> None:
    profile = HardwareCreate.model_validate(h100)
    assert profile.memory.device.bandwidth_bytes_per_s == 3.35e12
    assert profile.compute.matrix_flops_per_s["bf16"] == 989e12


def test_unknown_fields_are_rejected(h100: dict[str, Any]) -> None:
    h100["memory"]["device"]["bandwith_bytes_per_s"] = 1.0  # a typo must not be silently dropped
    assert any("memory.device.bandwith_bytes_per_s" in e and "Extra inputs" in e for e in _errors(h100))


@pytest.mark.parametrize("bad", [-1.0, 0.0, math.inf, -math.inf, math.nan])
def test_non_positive_and_non_finite_numbers_are_rejected(h100: dict[str, Any], bad: float) -> None:
    h100["memory"]["device"]["bandwidth_bytes_per_s"] = bad
    assert any(e.startswith("memory.device.bandwidth_bytes_per_s") for e in _errors(h100))


def test_efficiency_above_one_is_rejected(h100: dict[str, Any]) -> None:
    h100["efficiency"]["matmul"] = 1.2
    assert any(e.startswith("efficiency.matmul") for e in _errors(h100))


def test_a_figure_without_a_source_is_rejected(h100: dict[str, Any]) -> None:
    del h100["figure_sources"]["power.tdp_w"]
    assert any("power.tdp_w" in e and "without a source" in e for e in _errors(h100))


def test_a_citation_of_an_unknown_source_is_rejected(h100: dict[str, Any]) -> None:
    h100["figure_sources"]["power.tdp_w"] = "NOPE"
    assert any("'NOPE'" in e for e in _errors(h100))


def test_a_citation_of_a_field_that_does_not_exist_is_rejected(h100: dict[str, Any]) -> None:
    h100["figure_sources"]["memory.hbm"] = "NV-H100"
    assert any("'memory.hbm'" in e for e in _errors(h100))


def test_missing_sources_are_rejected(h100: dict[str, Any]) -> None:
    h100["sources"] = []
    assert any(e.startswith("sources") for e in _errors(h100))


def test_a_torus_needs_its_shape(h100: dict[str, Any]) -> None:
    doc = copy.deepcopy(h100)
    doc["interconnect"]["scale_up"]["topology"] = "torus"
    assert any("torus_dims" in e for e in _errors(doc))


def test_most_specific_citation_wins() -> None:
    sources = {"memory": "A", "memory.device.bandwidth_bytes_per_s": "B"}
    assert source_for("memory.device.bandwidth_bytes_per_s", sources) == "B"
    assert source_for("memory.device.capacity_bytes", sources) == "A"
    assert source_for("compute.units", sources) is None


def test_numeric_leaves_lists_numbers_and_number_lists() -> None:
    doc = {"name": "x", "a": {"b": 1, "c": "text", "d": True}, "tiles": [{"m": 1, "n": 2}], "dims": [4, 4]}
    assert sorted(numeric_leaves(doc)) == ["a.b", "dims", "tiles"]
