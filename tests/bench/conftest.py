"""The accuracy figures, computed once per test run from the repository's own measured data (`validation/`).

`fresh` computes a section of the baseline (`ops`, `collectives`, `inference`, `training`, `serving`) when a test
first reads it. The expensive readers of the validation data (every table parsed, every serving row simulated, every
op family predicted) are memoised for the whole run, across pytest-xdist's workers: the first process that needs one
computes it under a file lock and leaves it in the run's shared temporary directory, and the others wait for it and
read it. So a section is computed once however the tests that read it are spread over the workers; their
`xdist_group`s (`scripts/test.sh` runs `--dist loadgroup`) keep them together besides, so that no worker waits.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import inspect
import json
import os
import pickle
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from bench import report, validate, validate_collectives, validate_serving

SECTIONS = ("ops", "collectives", "inference", "training", "serving")
BENCH_TESTS = Path(__file__).parent


def committed() -> dict[str, Any]:
    """bench/baseline.json as committed: what `python -m bench.report` last wrote."""
    doc: dict[str, Any] = json.loads(report.BASELINE.read_text())
    return doc


def group(section: str) -> pytest.MarkDecorator:
    """The xdist group of the tests that read `section` of `fresh`: the serving section's own (the longest, so
    scheduled first), the rest together."""
    return pytest.mark.xdist_group("baseline-serving" if section == "serving" else "baseline")


class RunCache:
    """Values computed once per test run, shared by the run's processes through pickles in one directory."""

    def __init__(self) -> None:
        self.directory: Path | None = None  # set by the session fixture below; a process-local dict until then
        self._local: dict[str, Any] = {}

    def get(self, key: str, compute: Callable[[], Any]) -> Any:
        if key in self._local:
            return self._local[key]
        if self.directory is None:
            value = compute()
        else:
            name = hashlib.sha256(key.encode()).hexdigest()[:24]
            path, lock = self.directory / f"{name}.pickle", self.directory / f"{name}.lock"
            with lock.open("w") as held:
                fcntl.flock(held, fcntl.LOCK_EX)  # released when the holder ends, even if it dies
                if path.exists():
                    value = pickle.loads(path.read_bytes())
                else:
                    value = compute()
                    partial = path.with_suffix(".partial")
                    partial.write_bytes(pickle.dumps(value))
                    partial.rename(path)
        self._local[key] = value
        return value


CACHE = RunCache()


def _memoised(function: Callable[..., Any]) -> None:
    """Replace a pure, expensive reader of the validation data by one memoised in `CACHE`, in every bench module
    that holds it: the tests that parse every table or simulate every serving row, and the baseline's sections that
    do the same, share one computation. Their callers only read what it returns."""
    signature = inspect.signature(function)
    qualified = f"{function.__module__}.{function.__qualname__}"

    @functools.wraps(function)
    def cached(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()  # f(root) and f(root, limit=None) are one computation
        return CACHE.get(f"{qualified}{tuple(bound.arguments.values())!r}", lambda: function(*args, **kwargs))

    for module in [m for name, m in sys.modules.items() if name == "bench" or name.startswith("bench.")]:
        for attribute, value in list(vars(module).items()):
            if value is function:
                setattr(module, attribute, cached)


for _function in (
    validate.load,
    validate.report,
    validate_collectives.report,
    validate_serving.silicon_rows,
    validate_serving.overview_rows,
):
    _memoised(_function)


class Sections(Mapping[str, dict[str, Any]]):
    """The baseline's sections as `report.section` computes them now, each on first use."""

    def __getitem__(self, name: str) -> dict[str, Any]:
        if name not in SECTIONS:
            raise KeyError(name)
        section: dict[str, Any] = CACHE.get(f"report.section({name!r})", lambda: report.section(name))
        return section

    def __iter__(self) -> Iterator[str]:
        return iter(SECTIONS)

    def __len__(self) -> int:
        return len(SECTIONS)


@pytest.fixture(scope="session", autouse=True)
def _run_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The run's shared directory: under xdist each worker's base temporary directory is inside the run's."""
    base = tmp_path_factory.getbasetemp()
    CACHE.directory = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    (CACHE.directory / "bench-cache").mkdir(exist_ok=True)
    CACHE.directory = CACHE.directory / "bench-cache"


@pytest.fixture(scope="session")
def fresh() -> Mapping[str, dict[str, Any]]:
    """Every figure of the comparisons, recomputed now with the model as it is (each section when first read)."""
    return Sections()


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py's, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that reads `fresh` is slow (left out of the fast tier) and, unless it names its own section's group,
    runs in the group of the sections other than serving; the serving group's tests are the longest."""
    for item in items:
        if any(m.args == ("baseline-serving",) for m in item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.longest)
        if "fresh" in getattr(item, "fixturenames", ()) and item.path.is_relative_to(BENCH_TESTS):
            item.add_marker(pytest.mark.slow)
            if item.get_closest_marker("xdist_group") is None:
                item.add_marker(group("ops"))
