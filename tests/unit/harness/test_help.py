"""Help that teaches (issue 50): each command's --help opens with what it does and one example,
marks what it needs, shows no other command's text, and `make fault --help` lists the kinds; the
glossary's words link to it where the README first uses them."""

from __future__ import annotations

import re

import pytest

from support.paths import ROOT
from tuning.harness import cli
from tuning.harness.faults.kinds import NAMES
from tuning.harness.flags import flag_args, flag_table

PARSER = cli.parser()
SUBS = next(a for a in PARSER._actions if a.dest == "command").choices


@pytest.mark.parametrize("name", sorted(SUBS))
def test_help_opens_with_what_it_does_and_an_example(name):
    text = SUBS[name].format_help()
    head = text.split("\n\n")
    assert head[1].strip().endswith(".") and len(head[1].strip()) > 10, head[:3]
    assert head[2].startswith("example:\n  "), head[:3]
    example = head[2].split("\n")[1].strip()
    assert example.startswith(("make ", "python -m tuning.harness ")) and name in example


@pytest.mark.parametrize("name", sorted(SUBS))
def test_no_command_shows_another_commands_text(name):
    for f in flag_table.TABLE:
        if name not in f.commands:
            continue
        shown = flag_args.help_for(f, name)
        for other in flag_args.COMMANDS:
            if other != name:
                assert not re.search(rf"(^|; ){other}(, \w+)*: ", shown), (f.var, name, shown)


def test_required_flags_are_marked_and_fault_lists_its_kinds():
    fault = SUBS["fault"].format_help()
    assert re.search(r"--fault FAULT\s+\(required\)", fault)
    assert re.search(r"--from FROM\s+\(required\)", SUBS["repro"].format_help())
    listed = fault.split("FAULT is one of: ")[1].split(";")[0].split(", ")
    assert listed == list(NAMES)


def test_the_glossary_words_link_to_it_where_the_readme_first_uses_them():
    glossary = (ROOT / "docs/glossary.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^## (.+)$", glossary, re.M)
    }
    readme = (ROOT / "README.md").read_text()
    linked = set(re.findall(r"\]\(docs/glossary\.md#([^)]+)\)", readme))
    assert anchors <= linked, anchors - linked
    for anchor in linked:
        assert anchor in anchors, anchor
