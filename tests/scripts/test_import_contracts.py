"""docs/architecture.md's layer lists are pyproject.toml's import contracts as they are now (scripts/import_contracts.py
writes them), and its table of the core's sub-packages has a row for every sub-package the core's layers name."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "import_contracts.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_contracts", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_section_is_the_contracts_as_they_are() -> None:
    m = _module()
    doc = m.DOC.read_text()
    assert doc.count(m.BEGIN) == 1 and doc.count(m.END) == 1
    assert m.render(doc, m.contracts()) == doc, "docs/architecture.md is stale: run python scripts/import_contracts.py"


def test_the_core_table_has_a_row_for_every_sub_package_of_the_core_layers() -> None:
    m = _module()
    (core,) = [c for c in m.contracts() if c["type"] == "layers" and c.get("containers") == ["roofline"]]
    packages = {name.strip() for layer in m.layers(core) for name in re.split(r"[|:]", layer)}
    public = sorted(p for p in packages if not p.startswith("_"))
    table = m.DOC.read_text().split("### The core's sub-packages", 1)[1].split("\n\n", 2)[1]
    rows = re.findall(r"^\| `roofline\.(\w+)` \|", table, re.MULTILINE)
    assert [p for p in public if p not in rows] == []


def test_a_contract_is_written_as_its_layers_top_to_bottom() -> None:
    m = _module()
    contracts = [
        {"name": "Core: a_b on *c*", "type": "layers", "containers": ["pkg"], "layers": ["(top) | (side)", "low"]},
        {"name": "No web", "type": "forbidden", "source_modules": ["pkg"], "forbidden_modules": ["web", "db"]},
        {"name": "Apart", "type": "independence", "modules": ["pkg.a", "pkg.b"]},
    ]
    assert m.section(contracts) == (
        "**Core: a\\_b on \\*c\\***, in `pkg`:\n\n```\ntop | side\nlow\n```\n\n"
        "- No web: `pkg` never imports `web`, `db`.\n"
        "- Apart: none of `pkg.a`, `pkg.b` imports another."
    )
    doc = f"Before.\n\n{m.BEGIN}\nold\n{m.END}\n\nAfter.\n"
    assert m.render(doc, contracts) == f"Before.\n\n{m.BEGIN}\n{m.section(contracts)}\n{m.END}\n\nAfter.\n"
