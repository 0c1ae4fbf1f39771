"""The direction of imports is the architecture: roofline ← schemas ← adapters ← service; hardware_db ← service;
schemas ← measured ← bench and the CLI; worker → schemas. Each contract in pyproject.toml is shown to fail when
broken: one copy of the project holds an import against each contract, and lint-imports' report on it (one run)
must name each contract, and under it that contract's own import."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

from tests.conftest import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = [c["name"] for c in CONFIG["contracts"]]


def _run(cwd: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
        # COLUMNS: one contract per line, however long its name.
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin", "COLUMNS": "250"},
    )  # fmt: skip


def _broken(result: subprocess.CompletedProcess[str]) -> list[str]:
    return _broken_in(result.stdout)


def _broken_in(report: str) -> list[str]:
    return [name for name in CONTRACTS if f"{name} BROKEN" in report]


def _project_copy(tmp_path: Path) -> Path:
    """The project's packages (their Python files) and pyproject.toml, in `tmp_path`."""
    for package in CONFIG["root_packages"]:
        shutil.copytree(REPO / package, tmp_path / package, ignore=_not_python)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _not_python(directory: str, names: list[str]) -> list[str]:
    """What `copytree` leaves out: caches, and files that are not Python (assets, YAML, notes)."""
    return [n for n in names if n == "__pycache__" or not (n.endswith(".py") or (Path(directory) / n).is_dir())]


def _add(root: Path, module: str, source: str) -> None:
    """Appends `source` to a module of the copy (a new module if there is none)."""
    path = root / (module.replace(".", "/") + ".py")
    path.write_text((path.read_text() if path.exists() else "") + "\n" + source + "\n")


def test_the_repository_keeps_its_import_contracts() -> None:
    result = _run(REPO, REPO / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    assert _broken(result) == []


def test_outside_the_core_only_its_public_modules_are_imported() -> None:
    """`roofline` and its sub-packages (`roofline.ops`, `roofline.collectives`, `roofline.inference`,
    `roofline.calibration`) are the core's interface; a module whose name starts with an underscore is private to
    the package that holds it, so nothing outside `roofline/` (bench and tests included) imports one."""

    graph = grimp.build_graph(
        "roofline", "schemas", "hardware_db", "measured", "service", "worker", "migrations", "bench", "tests"
    )
    private = {m for m in graph.find_descendants("roofline") if any(p.startswith("_") for p in m.split(".")[1:])}
    offenders = sorted(
        f"{importer} imports {imported}"
        for imported in private
        for importer in graph.find_modules_that_directly_import(imported)
        if importer.split(".")[0] != "roofline"
    )
    assert offenders == []


# One import against each contract of the layer between the contract and the core and of the service's layering.
# Some break another contract too (an upward import inside a feature closes a cycle); each must break its own.
BREAKS = {
    "Adapters import only schemas, roofline, numpy and the standard library": [
        ("adapters._ops", "from service.errors import Unprocessable"),
    ],
    "The measured tables' parsers never import the service, the worker or the database and web stack": [
        ("measured.datasets", "from service.errors import Unprocessable\nimport sqlalchemy"),
    ],
    "Only the core imports its private modules (roofline._*, roofline.*._*)": [
        ("service.estimates.service", "from roofline.ops._matmul import matmul"),
    ],
    "Only adapters imports its private modules (adapters._*)": [
        ("service.charts.service", "from adapters._hardware import to_core"),
    ],
    "Service layers: app, features down to stored data, shared infrastructure": [
        ("service.benchmarks.service", "from service.system import service as system"),  # a lower feature, upwards
    ],
    "Feature folders: router (HTTP) above service (rules) above repository": [
        ("service.calibrations.repository", "from service.calibrations import service"),
    ],
    "Only the job runner knows Ray": [("service.plan.service", "import ray")],
    "Op, collective, inference, training estimates and uploads share adapters, not each other": [
        ("service.estimates.service", "from service.collectives import service as collectives"),
    ],
    "No import cycles between siblings (function-local imports included)": [
        ("service.loop_a", "def f() -> None:\n    from service import loop_b"),
        ("service.loop_b", "def g() -> None:\n    from service import loop_a"),
    ],
}


# The core and the worker, and the core's privacy from each package that uses it.
BREAKS.update(
    {
        "The modelling core imports numpy and the standard library only": [
            ("roofline.bad", "import fastapi\nimport sqlalchemy"),
        ],
        "The worker never imports the service or the database stack": [("worker.bad", "import service")],
    }
)
PEEKS = [(f"{package}.peek", "from roofline._num import ceil") for package in ("service", "bench", "worker")]
PRIVATE_CORE = "Only the core imports its private modules (roofline._*, roofline.*._*)"


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> str:
    """lint-imports' report on one copy of the project that holds every break above: one run, not one per break."""
    root = _project_copy(tmp_path_factory.mktemp("broken"))
    for module, source in [*(b for breaks in BREAKS.values() for b in breaks), *PEEKS]:
        _add(root, module, source)
    result = _run(root, root / "pyproject.toml")
    assert result.returncode != 0
    return result.stdout


def _section(report: str, contract: str) -> str:
    """What the report says under one broken contract's heading (up to the next contract's heading)."""
    after = report.split("Broken contracts", 1)[1].split(f"\n{contract}\n", 1)[1]
    ends = [after.find(f"\n{name}\n") for name in CONTRACTS if name != contract]
    return after[: min([e for e in ends if e >= 0], default=len(after))]


@pytest.mark.parametrize("contract", list(BREAKS))
def test_each_contract_fails_when_broken(broken: str, contract: str) -> None:
    """Each contract is broken, and by its own import (a module it was added to is named under its heading), not
    only by another contract's break that reaches it."""
    assert contract in CONTRACTS
    assert contract in _broken_in(broken), broken
    section = _section(broken, contract)
    # A cycle is reported by one of its edges (`.loop_b -> .loop_a`), so one of the contract's modules suffices.
    named = [m for m, _ in BREAKS[contract] if f"{m} -> " in section or f".{m.rsplit('.', 1)[1]} -> " in section]
    assert named, section


@pytest.mark.parametrize("module", [m for m, _ in PEEKS])
def test_service_bench_and_worker_may_not_import_a_private_core_module(broken: str, module: str) -> None:
    assert f"- {module} -> roofline._num" in _section(broken, PRIVATE_CORE)


def test_the_adapters_import_nothing_but_the_contract_the_core_and_numpy() -> None:
    # An allowlist, where the forbidden contract can only list what it forbids: every import of every module of
    # adapters/ is adapters, schemas, roofline, numpy or the standard library.
    graph = grimp.build_graph("adapters", include_external_packages=True, cache_dir=None)
    allowed = {"adapters", "schemas", "roofline", "numpy", *sys.stdlib_module_names}
    imported = {
        (module, name)
        for module in graph.find_descendants("adapters") | {"adapters"}
        for name in graph.find_modules_directly_imported_by(module)
    }
    assert {(m, n) for m, n in imported if n.split(".")[0] not in allowed} == set()
    assert {n.split(".")[0] for _, n in imported} >= {"schemas", "roofline", "numpy"}
