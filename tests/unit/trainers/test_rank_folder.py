"""tuning/container/rank/ is what a foreign image gets beside the rank recorder: every module there
is mounted (BESIDE_RECORDER is the folder), and each must import with the standard library alone,
since the user's image may have nothing else at the path it is loaded from. Imports of torch,
transformers or accelerate inside functions run only where those exist: allowed. No engine."""

from __future__ import annotations

import ast
import sys

import pytest

from support.paths import ROOT
from tuning.harness.contract.container import BESIDE_RECORDER, launch_files

RANK = ROOT / "tuning/container/rank"
MODULES = sorted(p for p in RANK.glob("*.py") if p.name != "__init__.py")


def module_level_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, top-level package) of every import that runs when the module is loaded: those
    of the module body, and of its `if`/`try` blocks, not those inside a function or class."""
    found = []

    def visit(body):
        for node in body:
            if isinstance(node, ast.Import):
                found.extend((node.lineno, a.name.split(".")[0]) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0 and node.module != "__future__":
                    found.append((node.lineno, node.module.split(".")[0]))
                elif node.level:  # a relative import: the package, not the standard library
                    found.append((node.lineno, "." * node.level + (node.module or "")))
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for block in ("body", "orelse", "finalbody", "handlers"):
                    for part in getattr(node, block, []):
                        visit(part.body if isinstance(part, ast.ExceptHandler) else [part])

    visit(tree.body)
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_a_rank_module_imports_only_the_standard_library_when_loaded(path):
    tree = ast.parse(path.read_text(), str(path))
    outside = [
        f"{path.name}:{line} imports {name}"
        for line, name in module_level_imports(tree)
        if name not in sys.stdlib_module_names
    ]
    assert outside == [], "loaded by file in a foreign image: " + "; ".join(outside)


def test_the_check_sees_an_import_outside_the_standard_library():
    tree = ast.parse(
        "import os\ntry:\n    import torch\nexcept ImportError:\n    pass\n"
        "def f():\n    import transformers\n"
    )
    assert [n for _, n in module_level_imports(tree)] == ["os", "torch"]


def test_beside_the_recorder_is_the_folder_and_each_is_mounted():
    assert set(BESIDE_RECORDER) == {p.name for p in MODULES} - {"rank_record.py"}
    files = launch_files(ROOT / "tuning/container")
    assert all(source.is_file() for source in files.values())
    assert {source.parent for name, source in files.items() if name != "harness_launch.py"} == {
        RANK
    }
