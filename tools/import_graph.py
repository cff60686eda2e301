"""Draw the package's import graph: ``python tools/import_graph.py`` writes
``docs/_static/import-graph.svg``.

Only imports that run count (those under ``if TYPE_CHECKING:`` do not), read
from the source with :mod:`ast`, so that the picture is the code's and needs
nothing installed. Modules are drawn in rows by how deep they stand: a module
is drawn above every module it imports, the pure core at the bottom.
``tests/test_layout.py`` checks that the graph has no cycle.
"""

from __future__ import annotations

import argparse
import ast
import html
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "scrapy_aimd"
OUTPUT = ROOT / "docs" / "_static" / "import-graph.svg"

Graph = dict[str, set[str]]


def modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _runtime_nodes(tree: ast.Module) -> Iterator[ast.AST]:
    """Every node outside ``if TYPE_CHECKING:`` blocks."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports when it runs."""
    is_package = path.name == "__init__.py"
    base = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                anchor = base.split(".")[: len(base.split(".")) - node.level + 1]
                module = ".".join([*anchor, module] if module else anchor)
            targets = [f"{module}.{alias.name}" for alias in node.names] + [module]
        for target in targets:
            # "from pkg import module" names a module; "from module import name" does not.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target != PACKAGE:
                found.add(target)
    return found


def graph(root: Path = ROOT) -> Graph:
    """Module -> the modules it imports; packages that import nothing are left out
    (``scrapy_aimd`` itself imports its classes lazily)."""
    known = modules(root)
    names = set(known)
    g = {name: imports_of(name, path, names) for name, path in known.items()}
    return {
        name: deps
        for name, deps in g.items()
        if deps or known[name].name != "__init__.py" or any(name in d for d in g.values())
    }


def cycles(g: Graph) -> list[list[str]]:
    """Every import cycle found by a depth-first search (empty: the graph is a DAG)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(g.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node)
    return found


def levels(g: Graph) -> dict[str, int]:
    """0 for a module that imports none of the package; else 1 + its deepest import."""
    memo: dict[str, int] = {}

    def level(node: str) -> int:
        if node not in memo:
            memo[node] = 0  # a cycle (reported elsewhere) must not recurse for ever
            memo[node] = 1 + max((level(n) for n in g[node]), default=-1)
        return memo[node]

    return {node: level(node) for node in g}


def _group(name: str) -> str:
    if name.startswith(f"{PACKAGE}.core"):
        return "core"
    if name.startswith(f"{PACKAGE}.report"):
        return "report"
    return "scrapy"


COLOURS = {"core": "#d9f0d3", "report": "#fde0c5", "scrapy": "#d6e6f5"}
BOX_H, ROW_GAP, COL_GAP, CHAR_W, MARGIN = 26, 70, 14, 7.2, 20


def svg(g: Graph) -> str:
    """The graph as a self-contained SVG: rows by level, the core at the bottom."""
    lv = levels(g)
    rows: dict[int, list[str]] = {}
    for node in sorted(g, key=lambda n: (_group(n) != "core", n)):
        rows.setdefault(lv[node], []).append(node)
    label = {n: n.removeprefix(f"{PACKAGE}.") if n != PACKAGE else n for n in g}
    width_of = {n: len(label[n]) * CHAR_W + 16 for n in g}
    row_width = {
        r: sum(width_of[n] for n in ns) + COL_GAP * (len(ns) - 1) for r, ns in rows.items()
    }
    total_w = max(row_width.values()) + 2 * MARGIN
    top = max(rows)
    pos: dict[str, tuple[float, float]] = {}
    for r, ns in rows.items():
        x = MARGIN + (total_w - 2 * MARGIN - row_width[r]) / 2
        y = MARGIN + (top - r) * (BOX_H + ROW_GAP)
        for n in ns:
            pos[n] = (x, y)
            x += width_of[n] + COL_GAP
    total_h = MARGIN * 2 + (top + 1) * BOX_H + top * ROW_GAP + 24
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" height="{total_h:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" font-family="sans-serif" font-size="12">',
        "<title>scrapy_aimd: which module imports which (generated by "
        "tools/import_graph.py)</title>",
        '<defs><marker id="a" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#777"/></marker></defs>',
    ]
    for src in sorted(g):
        for dst in sorted(g[src]):
            (x1, y1), (x2, y2) = pos[src], pos[dst]
            out.append(
                f'<line x1="{x1 + width_of[src] / 2:.1f}" y1="{y1 + BOX_H:.1f}" '
                f'x2="{x2 + width_of[dst] / 2:.1f}" y2="{y2:.1f}" stroke="#999" '
                f'stroke-opacity="0.55" marker-end="url(#a)"><title>'
                f"{html.escape(label[src])} imports {html.escape(label[dst])}</title></line>"
            )
    for n, (bx, by) in sorted(pos.items()):
        out.append(
            f'<g><title>{html.escape(n)}</title><rect x="{bx:.1f}" y="{by:.1f}" '
            f'width="{width_of[n]:.1f}" height="{BOX_H}" rx="5" fill="{COLOURS[_group(n)]}" '
            f'stroke="#555"/><text x="{bx + width_of[n] / 2:.1f}" y="{by + 17:.1f}" '
            f'text-anchor="middle">{html.escape(label[n])}</text></g>'
        )
    legend_y = total_h - 12
    left = float(MARGIN)
    for group, text in (
        ("core", "pure core (no Scrapy)"),
        ("scrapy", "Scrapy side"),
        ("report", "crawl report"),
    ):
        out.append(
            f'<rect x="{left:.0f}" y="{legend_y - 10:.0f}" width="12" height="12" '
            f'fill="{COLOURS[group]}" stroke="#555"/>'
            f'<text x="{left + 16:.0f}" y="{legend_y:.0f}">{text}</text>'
        )
        left += 16 + len(text) * CHAR_W + 24
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    g = graph()
    found = cycles(g)
    if found:
        for cycle in found:
            print("import cycle: " + " -> ".join(cycle), file=sys.stderr)
        return 1
    args.output.write_text(svg(g), encoding="utf-8")
    print(f"{args.output}: {len(g)} modules, {sum(map(len, g.values()))} imports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
