"""Each command's --help (spec/flag_args.py from spec/flag_table.py): it renders, exit 0 (a '%'
in a help argparse cannot expand once broke every command's); it lists exactly the table's flags
the command takes, each under its group's heading, the groups in the table's order; a flag the
command does not take is absent, yet still accepted, so that it is refused by name."""

from __future__ import annotations

import argparse
import re

import pytest

from tuning.harness import cli
from tuning.harness.errors import HarnessError
from tuning.harness.spec import flag_args
from tuning.harness.spec.flag_table import BY_VAR, GROUPS, RUN_GROUP, TABLE, usage

PARSER = cli.parser()
SUBPARSERS = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction))
COMMANDS = tuple(SUBPARSERS.choices)


def help_of(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.parser().parse_args([command, "--help"])
    out, err = capsys.readouterr()
    assert stop.value.code == 0, err
    return out


def sections(text: str) -> dict[str, list[str]]:
    """Each heading of a help text (`the job:`), in order, with the options listed under it."""
    out: dict[str, list[str]] = {}
    options = None
    for line in text.splitlines():
        if re.fullmatch(r"\S[^:]*:", line):
            options = out.setdefault(line[:-1], [])
        elif options is not None and (m := re.match(r"  (-[-\w]+)", line)):
            options.append(m[1])
    return out


def shows(text: str, option: str) -> bool:
    """--run, not --runs nor --run-id."""
    return re.search(rf"{re.escape(option)}(?![-\w])", text) is not None


def test_every_command_of_the_table_is_a_command_and_every_flag_shows_somewhere():
    """So that rendering every command's help expands every flag's help (a hidden one is not)."""
    for f in TABLE:
        assert f.commands and set(f.commands) <= set(COMMANDS), f.var
    assert len({f.var for f in TABLE}) == len(TABLE)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_commands_help_lists_the_flags_it_takes_by_group(command, capsys):
    text = help_of(command, capsys)
    want = {}
    for title, flags in GROUPS.items():
        taken = [f.option for f in flags if command in f.commands]
        taken += ["--runs"] if title == RUN_GROUP else []
        if taken:
            want[title] = taken
    shown = sections(text)
    own = shown.pop("options")  # -h and the command's own, not the table's (bench's probe)
    assert own[0] == "-h" and not {f.option for f in TABLE} & set(own)
    assert list(shown) == list(want)  # the groups, in the table's order
    assert shown == want
    for f in TABLE:
        assert shows(text, f.option) == (command in f.commands), f.var


@pytest.mark.parametrize("command", COMMANDS)
def test_a_flag_a_command_does_not_take_is_accepted_and_refused_by_name(command):
    for f in TABLE:
        if command in f.commands:
            continue
        a = PARSER.parse_args([command, f.option, *([] if f.switch else ["v"])])
        with pytest.raises(HarnessError, match=rf"^{f.var}=\S+ does not apply to `make {command}`"):
            flag_args.refuse_unused(a, command)


def test_make_help_lists_every_variable_once_under_its_group():
    text = usage()
    shown = {}
    title = None
    for line in text.splitlines()[1:]:
        if line.startswith("  ") and not line.startswith("    "):
            title = line.strip().removesuffix(":")
        else:
            shown.setdefault(title, []).append(line.split()[0].split("=")[0])
    want = {t: [f.var for f in fs] for t, fs in GROUPS.items()}
    want[RUN_GROUP].append("RUNS")
    assert shown == want


def test_no_reason_for_refusing_a_flag_names_a_command_that_takes_it():
    for var, why in flag_args.WHY_NOT.items():
        assert not set(BY_VAR[var].commands) & set(why), var
