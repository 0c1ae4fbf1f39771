"""The measured tables in ../shared/validation, for the accuracy tests: missing data skips a local run and fails CI."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from service.benchmarks.datasets import MissingData


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def require(find: Callable[[], Path], check: str) -> Path:
    """`find()`'s data directory; without it, skip `check` locally and fail it under CI=true."""
    try:
        return find()
    except MissingData as err:
        if in_ci():
            pytest.fail(f"{err}: CI must run the {check}", pytrace=False)
        pytest.skip(f"{err}; the {check} needs it (under CI=true this is a failure)")
