"""The flag table (flag_table.py) on the command line. Every subcommand's parser takes every flag
of the table, so a flag a command cannot honour reaches it and is refused by name, with the
reason (`refuse_unused`), never dropped: the Makefile passes every variable typed to every
target.
"""

from __future__ import annotations

import argparse

from tuning.harness.errors import HarnessError
from tuning.harness.spec.flag_table import TABLE, Flag


def add(p: argparse.ArgumentParser) -> None:
    """Every flag of the table, unset by default (None, or False for a switch): what a command
    does with an unset flag is its own default, and a set one it does not honour is refused."""
    for f in TABLE:
        if f.switch:
            p.add_argument(f.option, dest=f.dest, action="store_true", help=f.help)
        else:
            p.add_argument(f.option, dest=f.dest, metavar=f.var, help=f.help)


def typed(a: argparse.Namespace) -> list[Flag]:
    """The flags the user set."""
    return [f for f in TABLE if getattr(a, f.dest, None) not in (None, False)]


def refuse_unused(a: argparse.Namespace, command: str) -> None:
    """A flag set for a command that does not honour it: refused by name, with the reason."""
    wrong = [f for f in typed(a) if command not in f.commands]
    if not wrong:
        return
    lines = []
    for f in wrong:
        where = ", ".join(f"make {c}" for c in f.commands if c != "gpus") or "no make target"
        why = f.why_not.get(command) or f"it is for {where}"
        value = "1" if f.switch else getattr(a, f.dest)
        lines.append(f"{f.var}={value} does not apply to `make {command}`: {why}")
    raise HarnessError("; ".join(lines) + ". Drop it and run again.")
