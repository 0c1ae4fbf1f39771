"""The direction of imports is the architecture: roofline ← schemas ← hardware_db ← service; worker → schemas."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _run(cwd: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_the_repository_keeps_its_import_contracts() -> None:
    result = _run(REPO, REPO / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_the_check_fails_when_the_core_imports_the_web_stack_or_the_worker_imports_the_service(
    tmp_path: Path,
) -> None:
    # A miniature tree with the same contracts, broken on purpose.
    for package in ("roofline", "schemas", "hardware_db", "service", "worker", "migrations"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "roofline" / "bad.py").write_text("import fastapi\nimport sqlalchemy\n")
    (tmp_path / "worker" / "bad.py").write_text("import service\n")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    result = _run(tmp_path, tmp_path / "pyproject.toml")
    assert result.returncode != 0
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    broken = [c["name"] for c in contracts if f"{c['name']} BROKEN" in result.stdout]
    assert "The modelling core imports numpy and the standard library only" in broken
    assert "The worker never imports the service or the database stack" in broken


def test_outside_the_core_only_its_public_modules_are_imported() -> None:
    """`roofline` and its sub-packages (`roofline.ops`, `roofline.collectives`, `roofline.inference`,
    `roofline.calibration`) are the core's interface; a module whose name starts with an underscore is private to
    the package that holds it, so nothing outside `roofline/` (bench and tests included) imports one."""
    import grimp  # installed with import-linter

    graph = grimp.build_graph("roofline", "schemas", "hardware_db", "service", "worker", "migrations", "bench", "tests")
    private = {m for m in graph.find_descendants("roofline") if any(p.startswith("_") for p in m.split(".")[1:])}
    offenders = sorted(
        f"{importer} imports {imported}"
        for imported in private
        for importer in graph.find_modules_that_directly_import(imported)
        if importer.split(".")[0] != "roofline"
    )
    assert offenders == []
