"""The `ridgeline` command line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import ridgeline_command

pytestmark = pytest.mark.slow  # the CLI in subprocesses


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ridgeline_command(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_db_upgrade_then_catalogue_load_twice(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    up = _run("db", "upgrade", "--database-url", url, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    assert "database at revision 0008 (head 0008)" in up.stdout

    first = _run("catalogue", "load", "--database-url", url, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "catalogue hardware: 22 inserted, 0 updated, 0 unchanged" in first.stdout
    second = _run("catalogue", "load", "--database-url", url, cwd=tmp_path)
    assert "catalogue hardware: 0 inserted, 0 updated, 22 unchanged" in second.stdout
    assert "catalogue models: 0 inserted, 0 updated, 25 unchanged" in second.stdout


def test_catalogue_check_validates_the_files(tmp_path: Path) -> None:
    result = _run("catalogue", "check", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "22 hardware profiles and 25 model configs are valid" in result.stdout


def test_db_downgrade_to_base(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    _run("db", "upgrade", "--database-url", url, cwd=tmp_path)
    down = _run("db", "downgrade", "base", "--database-url", url, cwd=tmp_path)
    assert down.returncode == 0 and "database at revision None" in down.stdout


def test_unknown_command_is_an_error(tmp_path: Path) -> None:
    result = _run("frobnicate", cwd=tmp_path)
    assert result.returncode == 2 and "invalid choice" in result.stderr
