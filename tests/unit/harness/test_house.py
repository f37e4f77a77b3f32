"""The house's shape (docs/design.md): commands/ holds the verbs only (no command imports
another, and they are under 30 % of the host side's lines), GPUS crosses few rooms on its way
from `make up` to the containers, benchmarks/ files stay small, the formatter's escapes sit on
tables only, and every module, folder and class docs/design.md names exists."""

from __future__ import annotations

import ast
import re
import subprocess

from support.import_tree import Tree
from support.paths import ROOT

TREE = Tree()
HARNESS = ROOT / "tuning/harness"
COMMANDS = "tuning.harness.commands."
# What carries the GPU count: the flag, its typed fields, the plan and its makers
GPU_WORDS = re.compile(r"\b(gpus|gpu_ids|gpu_uuids|gpu_names|GpuPlan|plan_from|for_host)\b")


def command_of(module: str) -> str | None:
    """tuning.harness.soak.follow -> "soak"; None outside commands/."""
    return module.removeprefix(COMMANDS).split(".")[0] if module.startswith(COMMANDS) else None


def test_no_command_imports_another():
    crossing = sorted(
        f"{m} -> {d}"
        for m, deps in TREE.edges.items()
        if command_of(m)
        for d in deps
        if command_of(d) and command_of(d) != command_of(m)
    )
    assert crossing == [], crossing


def lines(paths) -> int:
    return sum(len(p.read_text().splitlines()) for p in paths)


def test_commands_hold_under_30_percent_of_the_host_side():
    host = lines(HARNESS.rglob("*.py"))
    commands = lines((HARNESS / "commands").rglob("*.py"))
    assert commands / host < 0.30, f"commands/ holds {commands} of {host} host lines"


def gpu_rooms() -> dict[str, list[str]]:
    """The rooms on `make up`'s way whose modules read the GPU count: the host side's (the
    import closure of commands/up.py, by layer), the Makefile, and the container side's
    launcher (what the containers run)."""
    todo, seen = ["tuning.harness.commands.up"], set()
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += TREE.edges.get(m, ())
    rooms: dict[str, list[str]] = {}
    for m in sorted(seen):
        if GPU_WORDS.search(TREE.files[m].read_text()):
            room = m.removeprefix("tuning.harness.").split(".")[0]
            rooms.setdefault(room, []).append(m)
    if re.search(r"\bGPUS\b", (ROOT / "Makefile").read_text()):
        rooms["Makefile"] = ["Makefile"]
    if re.search(r"GPU|gpu", (ROOT / "tuning/container/launch.py").read_text()):
        rooms["container side"] = ["tuning.launch"]
    return rooms


def test_gpus_crosses_fewer_rooms_than_eight():
    """Issue 52 counted 8 (19 files). The GPU plan is decided once (layout/options.py) and
    carried once (the topology's plan): the run's loop and the verbs ask it, never the count."""
    rooms = gpu_rooms()
    assert "run" not in rooms and "commands" not in rooms, rooms
    assert len(rooms) < 8, rooms


def test_every_benchmark_file_is_at_most_300_lines():
    long = {p.name: n for p in (ROOT / "benchmarks").glob("*.py") if (n := lines([p])) > 300}
    assert long == {}, long


def escapes(text: str) -> list[tuple[int, int]]:
    """(first, last) line of each stretch the formatter is told to leave: a `# fmt: skip`
    line, or `# fmt: off` to `# fmt: on` (or the file's end)."""
    out, start = [], None
    for i, line in enumerate(text.splitlines(), 1):
        if "# fmt: skip" in line:
            out.append((i, i))
        elif "# fmt: off" in line:
            start = i
        elif "# fmt: on" in line and start:
            out.append((start, i))
            start = None
    if start:
        out.append((start, len(text.splitlines())))
    return out


def on_a_table(tree: ast.Module, first: int, last: int) -> bool:
    """A statement ending in [first, last] holds a list or tuple of six or more words: a table
    whose alignment carries meaning (an argv, the words a reader keeps)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or not first <= node.end_lineno <= last:
            continue
        for seq in ast.walk(node):
            if isinstance(seq, (ast.List, ast.Tuple)) and len(seq.elts) >= 6:
                words = [e for e in seq.elts if isinstance(e, ast.Constant)]
                if len(words) * 2 >= len(seq.elts):
                    return True
    return False


def test_the_formatter_is_escaped_on_tables_only():
    """`# fmt: off` counts as a skip: neither may hide code from the formatter."""
    found, off_table = 0, []
    for path in sorted(
        p for d in ("tuning", "tests", "benchmarks") for p in (ROOT / d).rglob("*.py")
    ):
        text = path.read_text()
        if path.name == "test_house.py":
            continue  # names the markers, escapes nothing
        tree = ast.parse(text)
        for first, last in escapes(text):
            found += 1
            if not on_a_table(tree, first, last):
                off_table.append(f"{path.relative_to(ROOT)}:{first}")
    assert found, "no escape found: the reader misses them"
    assert off_table == [], off_table


def test_the_escape_reader_counts_fmt_off_and_sees_code_that_is_no_table():
    text = "x = 1  # fmt: skip\n# fmt: off\ny = [\n  1, 2,\n]\n# fmt: on\n"
    assert escapes(text) == [(1, 1), (2, 6)]
    assert not on_a_table(ast.parse(text), 2, 6)
    table = "# fmt: off\nargv = ['a', 'b', 'c', 'd', 'e', 'f']\n# fmt: on\n"
    assert on_a_table(ast.parse(table), 1, 3)


DESIGN = ROOT / "docs/design.md"
RUN_FOLDER = ("runs/", "output/")  # what a run writes, named in the contracts


def named_in(text: str) -> tuple[set[str], set[str]]:
    """(paths: `x/y.py`, `x/` and `tuning.a.b` in backticks, one in a room's row of a table
    as the room's own `room/y.py` where it is not whole; classes: CapWords in backticks)."""
    paths, classes = set(), set()
    for line in text.splitlines():
        row = re.match(r"\| `(\w+)/` \|", line)  # a room's row: its files are named bare
        for s in re.findall(r"`([^`\s]+)`", line):
            if s.startswith(RUN_FOLDER):
                continue  # a run's folder (runs/<id>/...), not the repository's
            if re.fullmatch(r"[\w./]+(\.py|/)", s) or s.startswith("tuning."):
                # in a room's row a bare name is the room's own; a longer one may be whole
                room = row and row.group(1)
                own = room and s.rstrip("/") != room and ("/" not in s.rstrip("/") or not exists(s))
                paths.add(f"{room}/{s}" if own else s)
            elif re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z]+)+", s):
                classes.add(s)
    return paths, classes


def exists(name: str) -> bool:
    """A path from the checkout, from tuning/ or from tuning/harness/ (design.md's rooms), a
    bare file name anywhere in tuning/, tests/ or benchmarks/, or a dotted module of tuning/."""
    if name.startswith("tuning.") and not name.endswith((".py", "/")):
        return name in TREE.files or name.rsplit(".", 1)[0] in TREE.files
    if "/" not in name:
        return any(p for d in ("tuning", "tests", "benchmarks") for p in (ROOT / d).rglob(name))
    return any((base / name).exists() for base in (ROOT, ROOT / "tuning", HARNESS))


def defined_classes() -> set[str]:
    return {n.name for t in TREE.trees.values() for n in ast.walk(t) if isinstance(n, ast.ClassDef)}


def ignored(name: str) -> bool:
    """What git ignores (build/, .venv): a build's output, there or not by the time a test
    looks (CI builds the images beside the tests), never a file of the repository."""
    return subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT).returncode == 0


def test_every_module_folder_and_class_design_md_names_exists():
    paths, classes = named_in(DESIGN.read_text())
    assert len(paths) > 30 and classes  # the reader finds the rooms it draws
    assert sorted(p for p in paths if not ignored(p) and not exists(p)) == []
    assert sorted(classes - defined_classes()) == []


def test_the_design_reader_sees_a_stale_name():
    text = "rooms: `spec/` holds `spec/options.py`, the `LayoutModel`\n| `run/` | `gone.py` |"
    paths, classes = named_in(text)
    assert [p for p in sorted(paths) if not exists(p)] == [
        "run/gone.py",
        "spec/",
        "spec/options.py",
    ]
    assert classes - defined_classes() == {"LayoutModel"}


def test_every_room_is_drawn_in_design_md():
    """Every sub-package and top module of tuning/harness/ is named there as a room."""
    paths, _ = named_in(DESIGN.read_text())
    rooms = {p.name + "/" for p in HARNESS.iterdir() if (p / "__init__.py").exists()}
    rooms |= {p.name for p in HARNESS.glob("*.py") if p.name != "__init__.py"}
    assert sorted(rooms - paths) == []
