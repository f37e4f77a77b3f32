"""The table of fault kinds (faults/kinds/): every kind is whole (an injector in its own
module, a record rule, a section in docs/faults.md), `make fault FAULT=?` lists exactly the
table, and the modules that run a fault read the table instead of naming kinds. No engine."""

from __future__ import annotations

import ast
import re
import subprocess

import pytest

from support.paths import ROOT
from tuning.harness.faults.kinds import NAMES, TABLE
from tuning.harness.faults.kinds.kind import FAILS, Kind

HARNESS = ROOT / "tuning/harness"
# The modules that run, follow, record and write any fault, list the pool's and strike a
# soak's: they read the table
READERS = (
    "commands/fault.py",
    "faults/inject.py",
    "faults/follow.py",
    "faults/record.py",
    "faults/write.py",
    "faults/pool_list.py",
    "commands/pool.py",
    "soak/follow.py",
)


def docs_sections() -> dict[str, str]:
    """docs/faults.md's kind sections: each name in backticks in a `### ` heading -> its text."""
    text = (ROOT / "docs/faults.md").read_text()
    out = {}
    for block in re.split(r"^(?=### )", text, flags=re.M)[1:]:
        heading = block.splitlines()[0]
        for name in re.findall(r"`([^`]+)`", heading):
            out[name] = block
    return out


@pytest.mark.parametrize("name", NAMES)
def test_every_kind_has_an_injector_a_record_rule_and_a_docs_section(name):
    kind = TABLE[name]
    injector = kind.inject or kind.due
    assert callable(injector), f"{name}: no injector"
    assert injector.__module__.startswith("tuning.harness.faults.kinds."), (
        f"{name}'s injector lives in {injector.__module__}, not in its kind's module"
    )
    assert callable(kind.goal) or callable(kind.expect.goal), f"{name}: no record rule"
    section = docs_sections().get(name)
    assert section, f"docs/faults.md has no section for {name} (### `{name}`)"
    if kind.not_here:  # where it does not apply, its section says so
        assert "not applicable" in section, f"docs/faults.md's {name}: not applicable where?"


def test_make_fault_lists_the_table(tmp_path):
    out = subprocess.run(
        ["make", "--no-print-directory", "fault", "FAULT=?", f"RUNS={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    listed = re.search(r"FAULT=\? is unknown; use one of (.*), or all$", out.stderr, re.M)
    assert listed, out.stderr
    assert tuple(listed.group(1).split(", ")) == NAMES
    assert list(tmp_path.iterdir()) == []  # refused before anything is written


def test_the_modules_that_run_a_fault_name_no_kind():
    """`grep` for a kind's name in commands/fault.py, its injector's driver, the follow, the record
    and the writer: none as a string, and no hyphenated name at all (not even in a comment)."""
    hyphenated = [n for n in NAMES if "-" in n]
    for module in READERS:
        text = (HARNESS / module).read_text()
        strings = {
            n.value
            for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        assert not strings & set(NAMES), f"{module} names {strings & set(NAMES)}"
        assert not [n for n in hyphenated if n in text], f"{module} names a kind"


def test_the_table_is_in_its_order_and_refuses_a_kind_without_its_parts():
    assert [TABLE[n].order for n in NAMES] == sorted(TABLE[n].order for n in NAMES)
    with pytest.raises(TypeError, match="lower-case letters"):
        Kind("Toy_1", 1, inject=lambda *a: "", expect=FAILS)
    with pytest.raises(TypeError, match="exactly one of inject and due"):
        Kind("toy", 1, expect=FAILS)
    with pytest.raises(TypeError, match="give expect or goal"):
        Kind("toy", 1, inject=lambda *a: "")
    with pytest.raises(TypeError, match="not_here takes"):
        Kind("toy", 1, inject=lambda *a: "", expect=FAILS, not_here={"gpu": "why"})
    with pytest.raises(TypeError, match="in the pool, so give judged"):
        Kind("toy", 1, inject=lambda *a: "", expect=FAILS, pool_place=1)


def test_where_a_kind_does_not_apply_is_said_by_the_kind():
    partition, crash, kill = TABLE["partition"], TABLE["crash"], TABLE["kill"]
    assert partition.why_not("single", "isolated", False).startswith("every rank of a single ")
    assert partition.why_not("per-rank", "shared", False).startswith("per-rank with NETWORK=")
    assert partition.why_not("per-rank", "isolated", False) is None
    assert crash.why_not("single", "isolated", True).startswith("crash raises inside this repo")
    assert crash.why_not("per-rank", "isolated", False) is None
    assert all(kill.why_not(lay, "isolated", True) is None for lay in ("single", "per-rank"))
