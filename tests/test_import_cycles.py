"""No import cycles anywhere in the project's packages: not between modules, not between packages, and not hidden
in a function (grimp, which import-linter is built on, reads every import statement, function-local and
`if TYPE_CHECKING:` ones included). A cycle between modules makes the order of imports matter; one between packages
means neither can be understood, tested or moved without the other."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from pathlib import Path

import grimp
import pytest

from tests.conftest import REPO

PACKAGES = ("roofline", "schemas", "adapters", "hardware_db", "measured", "service", "worker", "migrations", "bench")


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (each one cycle or more), by Tarjan's algorithm,
    iteratively (a deep import chain must not hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def import_cycles(packages: Iterable[str]) -> list[list[str]]:
    """Every cycle among the modules of `packages`, and among their packages at every depth (the modules of a package
    taken as one node: `adapters` ↔ `service`, `service.estimates` ↔ `service.calibrations`), as sorted lists of the
    names in it."""
    graph = grimp.build_graph(*packages, include_external_packages=False, cache_dir=None)
    modules = graph.modules
    imports = {m: set(graph.find_modules_directly_imported_by(m)) & modules for m in modules}
    cycles = _strongly_connected(imports)
    depth = max(m.count(".") for m in modules)
    for level in range(depth + 1):
        # Packages at this depth (and modules shallower than it, as themselves): a parent and its children are one
        # node, so `roofline/__init__.py` importing its own modules is no cycle.
        def node(module: str, level: int = level) -> str:
            return ".".join(module.split(".")[: level + 1])

        squashed: dict[str, set[str]] = {}
        for importer, imported in imports.items():
            a = node(importer)
            squashed.setdefault(a, set()).update(b for b in map(node, imported) if b != a and not _nested(a, b))
        cycles += [c for c in _strongly_connected(squashed) if c not in cycles]
    return cycles


def _nested(a: str, b: str) -> bool:
    return a.startswith(b + ".") or b.startswith(a + ".")


def test_the_project_has_no_import_cycles() -> None:
    assert import_cycles(PACKAGES) == []


def test_a_cycle_closed_by_a_function_local_import_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "loopy").mkdir()
    (tmp_path / "loopy" / "__init__.py").write_text("")
    (tmp_path / "loopy" / "a.py").write_text("from loopy import b\n")
    (tmp_path / "loopy" / "b.py").write_text("def late() -> None:\n    from loopy import a\n")
    (tmp_path / "loopy" / "c.py").write_text("from loopy import a\n")  # imports into the cycle, not part of it
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles(["loopy"]) == [["loopy.a", "loopy.b"]]


def test_a_cycle_between_packages_is_found_where_the_modules_have_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # up.x → down.y → up.z: no module imports itself back, but `up` and `down` each need the other.
    for package, modules in {"tangle": [], "tangle.up": ["x", "z"], "tangle.down": ["y"]}.items():
        (tmp_path / package.replace(".", "/")).mkdir()
        (tmp_path / package.replace(".", "/") / "__init__.py").write_text("")
        for name in modules:
            (tmp_path / package.replace(".", "/") / f"{name}.py").write_text("")
    (tmp_path / "tangle" / "up" / "x.py").write_text("from tangle.down import y\n")
    (tmp_path / "tangle" / "down" / "y.py").write_text("from tangle.up import z\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles(["tangle"]) == [["tangle.down", "tangle.up"]]


def test_every_package_import_linter_checks_is_checked_here() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert sorted(PACKAGES) == sorted(config["root_packages"])
