"""The import graph of all of tuning/: no cycle anywhere, every import of a tuning module names
one that exists and every `module.name` read from one a name it defines, the two sides apart,
and on the host side (tuning/harness) no sub-package imports one above it and only the entry
point imports the CLI. Imports are read with ast, those inside functions included, so a cycle
or a stale name hidden in a function body counts.

The host side's layers, bottom up (docs/design.md): errors, run_files, machine, contract,
flags, checks, layout, backends, stacks, run, verdict, bench, faults, clusterlogs, commands, cli.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import ROOT

TUNING = ROOT / "tuning"
LAYERS = [
    "errors",
    "run_files",
    "machine",
    "contract",
    "flags",
    "checks",
    "layout",
    "backends",
    "stacks",
    "run",
    "verdict",
    "bench",
    "faults",
    "clusterlogs",
    "commands",
    "cli",
    "__main__",
]


def name_of(path: Path, root: Path = TUNING) -> str:
    """tuning/harness/layout/layout.py -> "tuning.harness.layout.layout"; an __init__.py names its
    package."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_names(tree: ast.Module) -> set[str]:
    """What a module defines or imports at its top level: what `from it import x` may name."""
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


class Tree:
    """Every module of tuning/ with its top-level names and the tuning modules it imports;
    `stale` lists the imports that name no module and no name of one."""

    def __init__(self, root: Path = TUNING):
        self.files = {name_of(p, root): p for p in sorted(root.rglob("*.py"))}
        self.trees = {m: ast.parse(p.read_text()) for m, p in self.files.items()}
        self.names = {m: top_names(t) for m, t in self.trees.items()}
        for sub in self.files:  # a package's submodules are its attributes too
            parent, _, leaf = sub.rpartition(".")
            if parent in self.names:
                self.names[parent].add(leaf)
        self.stale: list[str] = []
        self.edges = {m: self._imports(m) for m in self.files}
        self.missing = [u for m in self.files for u in self._uses(m)]

    def _imports(self, module: str) -> set[str]:
        path = self.files[module]
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        out = set()
        for node in ast.walk(self.trees[module]):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package[: len(package) - node.level + 1] + [node.module or ""]
                    base = ".".join(parts).strip(".")
                elif (node.module or "").split(".")[0] == "tuning":
                    base = node.module
                else:
                    continue
                for alias in node.names:  # `from pkg import x`: a module, or a name in pkg
                    sub = f"{base}.{alias.name}"
                    if sub in self.files:
                        out.add(sub)
                    elif base in self.files and alias.name in self.names[base]:
                        out.add(base)
                    else:
                        self.stale.append(f"{module}: from {base} import {alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] != "tuning":
                        continue
                    if alias.name in self.files:
                        out.add(alias.name)
                    else:
                        self.stale.append(f"{module}: import {alias.name}")
        return out - {module}

    def _uses(self, module: str) -> list[str]:
        """`mod.name` where mod was imported as a tuning module and defines no `name`: what an
        import test alone misses when a function moved out of a module still imported."""
        bound = {}  # local name -> the tuning module it holds
        for node in ast.walk(self.trees[module]):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tuning"):
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in self.files:
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in self.files:
                        bound[alias.asname] = alias.name
        return [
            f"{module}:{node.lineno}: {node.value.id}.{node.attr} ({bound[node.value.id]} has none)"
            for node in ast.walk(self.trees[module])
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and node.attr not in self.names[bound[node.value.id]]
            and not node.attr.startswith("__")  # __file__ and the like: every module's
        ]


TREE = Tree()


def layer(module: str) -> int:
    """The host side's layer of a tuning.harness module (-1: the package's own __init__)."""
    top = module.removeprefix("tuning.harness.").split(".")[0]
    return LAYERS.index(top) if top in LAYERS else -1


def harness(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    return {
        m: {d for d in deps if d.startswith("tuning.harness.")}
        for m, deps in edges.items()
        if m.startswith("tuning.harness.")
    }


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


def test_the_reader_sees_both_sides_and_a_stale_name(tmp_path):
    edges = TREE.edges
    assert "tuning.harness.layout.layout" in edges["tuning.harness.backends.compose"]
    assert {"tuning.harness.layout.options", "tuning.harness.run.lifecycle"} <= edges[
        "tuning.harness.commands.up"
    ]
    assert "tuning.sft.tokenized" in edges["tuning.sft.data"]  # inside a function
    pkg = tmp_path / "tuning"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a/__init__.py").write_text("X = 1\n")
    (pkg / "b.py").write_text("from tuning.a import X\n\ndef f():\n    from tuning.a import gone\n")
    assert Tree(pkg).stale == ["tuning.b: from tuning.a import gone"]


def test_every_import_of_a_tuning_module_names_one_that_exists():
    assert TREE.stale == []


def test_every_name_read_from_a_tuning_module_is_one_it_defines(tmp_path):
    pkg = tmp_path / "tuning"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def kept():\n    pass\n")
    (pkg / "b.py").write_text("from tuning import a\n\na.kept()\na.moved()\n")
    assert Tree(pkg).missing == ["tuning.b:4: a.moved (tuning.a has none)"]
    assert TREE.missing == []


def test_the_import_graph_of_tuning_is_acyclic():
    cycle = find_cycle(TREE.edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_container_side_never_imports_the_host_side():
    up = sorted(
        f"{m} -> {d}"
        for m, deps in TREE.edges.items()
        if not m.startswith("tuning.harness")
        for d in deps
        if d.startswith("tuning.harness")
    )
    assert up == [], up


def test_only_the_entry_point_imports_the_cli():
    importers = sorted(m for m, deps in TREE.edges.items() if "tuning.harness.cli" in deps)
    assert importers == ["tuning.harness.__main__"], importers


def test_every_host_module_lives_in_a_layer():
    assert sorted(m for m in harness(TREE.edges) if layer(m) < 0) == []


def test_no_layer_imports_one_above_it():
    upward = sorted(
        f"{name} -> {dep}"
        for name, deps in harness(TREE.edges).items()
        for dep in deps
        if layer(dep) > layer(name)
    )
    assert upward == [], upward
