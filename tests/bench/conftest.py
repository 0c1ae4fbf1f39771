"""The accuracy figures, computed once per test process from the repository's own measured data (`validation/`).

`fresh` computes a section of the baseline (`ops`, `collectives`, `inference`, `training`, `serving`) when a test
first reads it, and keeps it for the rest of the run. Under pytest-xdist the tests that read one section share an
`xdist_group` (`scripts/test.sh` runs `--dist loadgroup`), so that each section is computed by one worker only, and
the serving section (the longest: every measured deployment simulated) beside the others rather than after them.
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from bench import report, validate, validate_serving

SECTIONS = ("ops", "collectives", "inference", "training", "serving")
BENCH_TESTS = Path(__file__).parent


def committed() -> dict[str, Any]:
    """bench/baseline.json as committed: what `python -m bench.report` last wrote."""
    doc: dict[str, Any] = json.loads(report.BASELINE.read_text())
    return doc


def group(section: str) -> pytest.MarkDecorator:
    """The xdist group of the tests that read `section` of `fresh`: the serving section's own, the rest together."""
    return pytest.mark.xdist_group("baseline-serving" if section == "serving" else "baseline")


class Sections(Mapping[str, dict[str, Any]]):
    """The baseline's sections as `report.section` computes them now, each on first use."""

    def __init__(self) -> None:
        self._done: dict[str, dict[str, Any]] = {}

    def __getitem__(self, name: str) -> dict[str, Any]:
        if name not in SECTIONS:
            raise KeyError(name)
        if name not in self._done:
            self._done[name] = report.section(name)
        return self._done[name]

    def __iter__(self) -> Iterator[str]:
        return iter(SECTIONS)

    def __len__(self) -> int:
        return len(SECTIONS)


_SECTIONS = Sections()


def _memoised(function: Callable[..., Any]) -> None:
    """Replace a pure, expensive reader of the validation data by a memoised one, in every bench module that holds
    it, for this test process: the tests that parse every table or simulate every serving row (and the baseline's
    sections that do the same) share one computation. Their callers only read what it returns."""
    signature = inspect.signature(function)
    done: dict[tuple[Any, ...], Any] = {}

    @functools.wraps(function)
    def cached(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()  # f(root) and f(root, limit=None) are one computation
        key = tuple(bound.arguments.values())
        if key not in done:
            done[key] = function(*args, **kwargs)
        return done[key]

    for module in [m for name, m in sys.modules.items() if name == "bench" or name.startswith("bench.")]:
        for attribute, value in list(vars(module).items()):
            if value is function:
                setattr(module, attribute, cached)


for _function in (validate.load, validate_serving.silicon_rows, validate_serving.overview_rows):
    _memoised(_function)


@pytest.fixture(scope="session")
def fresh() -> Mapping[str, dict[str, Any]]:
    """Every figure of the comparisons, recomputed now with the model as it is (each section when first read)."""
    return _SECTIONS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that reads `fresh` is slow (left out of the fast tier) and, unless it names its own section's group,
    runs in the group of the sections other than serving."""
    for item in items:
        if "fresh" in getattr(item, "fixturenames", ()) and item.path.is_relative_to(BENCH_TESTS):
            item.add_marker(pytest.mark.slow)
            if item.get_closest_marker("xdist_group") is None:
                item.add_marker(group("ops"))
