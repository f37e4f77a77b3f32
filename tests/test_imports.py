"""The host side's import graph (tuning/harness/*.py) has no cycle, and only the entry point
imports the CLI. Imports are read with ast, those inside functions included, so a cycle
hidden in a function body counts."""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "tuning/harness"
PACKAGE = "tuning.harness"


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The harness modules `path` imports, by short name."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = node.module
            elif node.level == 0 and (node.module or "").startswith(PACKAGE):
                base = node.module.removeprefix(PACKAGE).lstrip(".") or None
            else:
                continue
            if base:
                out.add(base.split(".")[0])
            else:  # from . import a, b
                out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    out.add(alias.name.removeprefix(PACKAGE + ".").split(".")[0])
    return out & modules - {path.stem}


def graph() -> dict[str, set[str]]:
    modules = {p.stem for p in HARNESS.glob("*.py")}
    return {p.stem: imports_of(p, modules) for p in sorted(HARNESS.glob("*.py"))}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}  # "open" while on the path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_finder_sees_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_host_side_import_graph_is_acyclic():
    edges = graph()
    assert {"cli", "options", "run", "nodes", "layout"} <= set(edges), sorted(edges)
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle on the host side: " + " -> ".join(cycle)


def test_only_the_entry_point_imports_the_cli():
    importers = sorted(name for name, deps in graph().items() if "cli" in deps)
    assert importers == ["__main__"], importers
