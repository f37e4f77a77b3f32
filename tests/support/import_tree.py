"""The import graph of tuning/, read with ast (imports inside functions included): each
module's top-level names and the tuning modules it imports. test_imports.py holds the layers to
it; test_house.py the commands' shape."""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import ROOT

TUNING = ROOT / "tuning"


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
