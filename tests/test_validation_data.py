"""The repository carries the measured data it validates against: nothing at run or test time reads ../shared."""

from __future__ import annotations

import re
from pathlib import Path

from measured import datasets

REPO = Path(__file__).resolve().parents[1]
CODE = ("roofline", "schemas", "hardware_db", "service", "worker", "bench", "tests", "scripts", "migrations")


def test_the_data_directory_is_the_repositorys_own() -> None:
    assert datasets.DATA_DIR == REPO / "validation"
    assert datasets.data_dir() == REPO / "validation"


def test_every_source_folder_names_its_licence_commit_and_attribution() -> None:
    folders = [p for p in (REPO / "validation").iterdir() if p.is_dir() and p.name != "LICENSES"]
    assert len(folders) >= 12
    for folder in folders:
        text = (folder / "README.md").read_text()
        assert "**Licence:**" in text and "**Commit / version:**" in text and "**Source:**" in text, folder
        for link in re.findall(r"\]\((\.\./LICENSES/[^)]+)\)", text):
            assert (folder / link).is_file(), (folder, link)


def test_no_code_builds_a_path_into_shared() -> None:
    # Only the developer command that copies new tables in (scripts/sync_validation.py) may look at ../shared.
    pattern = re.compile(r"""(parent|parents\[\d\])\s*/\s*["']shared["']|["']\.\./shared""")
    offenders = [
        str(path.relative_to(REPO))
        for folder in CODE
        for path in (REPO / folder).rglob("*.py")
        if path.name != "sync_validation.py" and path.name != Path(__file__).name and pattern.search(path.read_text())
    ]
    assert offenders == []
