"""The import graph of all of tuning/: no cycle anywhere, every import of a tuning module names
one that exists and every `module.name` read from one a name it defines, the two sides apart,
and on the host side (tuning/harness) no sub-package imports one above it and only the entry
point imports the CLI. Imports are read with ast, those inside functions included, so a cycle
or a stale name hidden in a function body counts.

The host side's layers, bottom up (docs/design.md): errors, watch, run_files, machine, contract,
flags, checks, layout, backends, stacks, run, verdict, bench, faults, clusterlogs,
soak, rehearsal, commands, cli.
"""

from __future__ import annotations

from support.import_tree import Tree

LAYERS = [
    "errors",
    "watch",
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
    "soak",
    "rehearsal",
    "commands",
    "cli",
    "__main__",
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
    assert (
        "tuning.container.sft.tokenized" in edges["tuning.container.sft.data"]
    )  # inside a function
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
