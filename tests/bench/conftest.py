"""The accuracy figures, computed once per test session from the repository's own measured data (`validation/`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import report


def committed() -> dict[str, Any]:
    """bench/baseline.json as committed: what `python -m bench.report` last wrote."""
    doc: dict[str, Any] = json.loads(report.BASELINE.read_text())
    return doc


@pytest.fixture(scope="session")
def fresh() -> dict[str, Any]:
    """Every figure of the three comparisons, recomputed now with the model as it is."""
    return report.baseline()
