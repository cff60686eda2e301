"""The house rules of the layout: no import cycle, the core imports only the
core, and no module reads another's private attributes (but ``_compat``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tools import import_graph

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "scrapy_aimd"


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph.graph()
    assert graph.get("scrapy_aimd.scheduler")
    assert import_graph.cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert import_graph.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


def test_the_core_imports_only_the_core() -> None:
    for module, imports in import_graph.graph().items():
        if module.startswith("scrapy_aimd.core"):
            outside = {m for m in imports if not m.startswith("scrapy_aimd.core")}
            assert not outside, (module, outside)


def test_the_picture_is_drawn_from_the_graph(tmp_path: Path) -> None:
    out = tmp_path / "graph.svg"
    assert import_graph.main(["-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<svg") and ">scheduler</text>" in text
    assert (ROOT / "docs" / "_static" / "import-graph.svg").exists()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_private_names(tree: ast.Module) -> set[str]:
    """Private names a module defines: functions, classes, attributes it assigns."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return {name for name in names if _private(name)}


def foreign_private_reads(path: Path) -> list[str]:
    """``x._name`` where ``_name`` is not this module's own, and private imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _own_private_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            found.append(f"{path.name}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom):
            found += [
                f"{path.name}:{node.lineno}: import {alias.name}"
                for alias in node.names
                if _private(alias.name)
            ]
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "_compat.py")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_reads_another_modules_private_names(path: Path) -> None:
    assert foreign_private_reads(path) == []


def test_the_private_name_check_can_fail(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from x import _hidden\n"
        "class A:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "def f(a, engine):\n"
        "    return a._mine, engine._slot\n",
        encoding="utf-8",
    )
    assert foreign_private_reads(module) == ["m.py:1: import _hidden", "m.py:6: ._slot"]
