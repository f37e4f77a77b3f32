"""The host side's import graph (tuning/harness/**.py): no cycle, only the entry point imports
the CLI, and no sub-package imports one above it. Imports are read with ast, those inside
functions included, so a cycle hidden in a function body counts.

The layers, bottom up (docs/design.md): errors, run_files, machine, spec, backends, run, verdict,
commands, cli.
"""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "tuning/harness"
PACKAGE = "tuning.harness"
LAYERS = [
    "errors",
    "run_files",
    "machine",
    "spec",
    "backends",
    "run",
    "verdict",
    "commands",
    "cli",
    "__main__",
]


def name_of(path: Path) -> str:
    """spec/layout.py -> "spec.layout"; spec/__init__.py -> "spec"."""
    parts = path.relative_to(HARNESS).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts) or "__init__"


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The harness modules `path` imports, by dotted name under tuning.harness."""
    here = name_of(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + [node.module or ""])
            elif (node.module or "").startswith(PACKAGE):
                base = node.module.removeprefix(PACKAGE)
            else:
                continue
            base = base.strip(".")
            for alias in node.names:  # `from pkg import module` names a module
                sub = f"{base}.{alias.name}".strip(".")
                out.add(sub if sub in modules else base)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    out.add(alias.name.removeprefix(PACKAGE + "."))
    return out & modules - {name_of(path)}


def graph() -> dict[str, set[str]]:
    files = sorted(HARNESS.rglob("*.py"))
    modules = {name_of(p) for p in files}
    return {name_of(p): imports_of(p, modules) for p in files}


def layer(module: str) -> int:
    top = module.split(".")[0]
    return LAYERS.index(top) if top in LAYERS else -1  # the package's own __init__


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


def test_the_reader_sees_sub_packages():
    edges = graph()
    assert {"cli", "spec.options", "run.lifecycle", "backends.nodes", "spec.layout"} <= set(edges)
    assert "spec.layout" in edges["backends.compose"]
    assert {"spec.options", "commands.up"} <= edges["cli"]
    assert {"spec.options", "run.lifecycle"} <= edges["commands.up"]


def test_host_side_import_graph_is_acyclic():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle on the host side: " + " -> ".join(cycle)


def test_only_the_entry_point_imports_the_cli():
    importers = sorted(name for name, deps in graph().items() if "cli" in deps)
    assert importers == ["__main__"], importers


def test_every_module_lives_in_a_layer():
    assert sorted(m for m in graph() if layer(m) < 0) == ["__init__"]


def test_no_layer_imports_one_above_it():
    upward = sorted(
        f"{name} -> {dep}"
        for name, deps in graph().items()
        for dep in deps
        if layer(dep) > layer(name)
    )
    assert upward == [], upward
