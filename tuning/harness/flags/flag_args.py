"""The flag table (flag_table.py) on the command line. Each command's --help shows the flags it
takes, under their groups' headings; every other flag of the table is accepted too, hidden, so
that one typed reaches the command and is refused by name, with the reason (`refuse_unused`),
never dropped nor taken for a typo: the Makefile passes every variable typed to every target.
"""

from __future__ import annotations

import argparse

from tuning.harness.errors import HarnessError
from tuning.harness.flags.flag_table import GROUPS, RUN, RUN_GROUP, RUNS_HELP, TABLE, Flag

_KUBE_SHAPE = (
    "a Kubeflow job's shape is NODES pods of GPUS (or NPROC) ranks each, one "
    "container per pod; KIND=job is one pod with a container per rank, the shape of "
    "LAYOUT=per-rank NETWORK=shared"
)
_BENCH_LAYOUTS = "bench runs every layout side by side; choose them with LAYOUTS=single,..."
_BENCH_FRESH = "every layout run of a bench starts afresh"
_FRESH = "every fault run starts afresh, so that what the fault did is all that happened"
_SOAK_FRESH = "a soak starts afresh and resumes from its own checkpoints after each failure"
_FRESH_RUNS = {"bench": _BENCH_FRESH, "fault": _FRESH, "soak": _SOAK_FRESH}

# Why a command refuses a flag, where "it is for make <the commands that take it>" says too little.
WHY_NOT: dict[str, dict[str, str]] = {
    "LAYOUT": {"bench": _BENCH_LAYOUTS, "kube": _KUBE_SHAPE},
    "NETWORK": {"bench": _BENCH_LAYOUTS, "kube": _KUBE_SHAPE},
    "MEMORY": {"kube": "a pod's memory is its requests per rank (kube_pod.py)"},
    "MAX_RESTARTS": {
        "bench": "a bench measures runs that are not restarted",
        "soak": "a soak restarts the group without a limit until DURATION is up",
    },
    "RESUME": _FRESH_RUNS,
    "RESUME_FROM": _FRESH_RUNS,
    "DRY_RUN": {"kube": "kube renders and runs nothing unless REHEARSE=1"},
    "RANK": {"kube": "the rehearsal kills a pod: KILL=i"},
    "KILL": {"fault": "make fault hits RANK=i with FAULT=kill"},
    "OUTPUT_CLAIM": dict.fromkeys(
        RUN, "a run here writes to runs/<id>/output; a claim is a cluster's (make kube)"
    ),
}


def add(p: argparse.ArgumentParser, command: str, runs: str) -> None:
    """Every flag of the table on `command`'s parser, unset by default (None, or False for a
    switch: what a command does with an unset flag is its own default). Those it takes show
    under their group's heading, in the table's order; the others are hidden (a group of none
    shows no heading). RUNS, every command's, shows with the run's flags."""
    for title, flags in GROUPS.items():
        group = p.add_argument_group(title)
        for f in flags:
            shown = help_for(f, command) if command in f.commands else argparse.SUPPRESS
            if f.switch:
                group.add_argument(f.option, dest=f.dest, action="store_true", help=shown)
            else:
                group.add_argument(f.option, dest=f.dest, metavar=f.var, help=shown)
        if title == RUN_GROUP:
            group.add_argument("--runs", default=runs, help=RUNS_HELP)


REQUIRED = {"fault": {"FAULT"}, "repro": {"FROM"}}  # no default: the command needs them


def help_for(f: Flag, command: str) -> str:
    """A flag's help as `command` shows it: the table's text, less the parts for other commands
    (a part "; kube: N per pod" shows under kube alone, without its label), and marked where
    the command needs it."""
    parts = f.help.split("; ")
    kept = []
    for part in parts:
        label, colon, rest = part.partition(": ")
        names = [n.strip() for n in label.split(",")] if colon else []
        if names and all(n in COMMANDS for n in names):
            if command in names:
                kept.append(rest)
            continue
        kept.append(part)
    text = "; ".join(kept)
    return f"(required) {text}" if f.var in REQUIRED.get(command, ()) else text


COMMANDS = ("up", "bench", "fault", "soak", "pool", "repro", "kube", "image", "down", "logs")
COMMANDS += ("ps", "stacks", "gpus", "examples")


def typed(a: argparse.Namespace) -> list[Flag]:
    """The flags the user set."""
    return [f for f in TABLE if getattr(a, f.dest, None) not in (None, False)]


def refuse_unused(a: argparse.Namespace, command: str) -> None:
    """A flag set for a command that does not take it: refused by name, with the reason."""
    wrong = [f for f in typed(a) if command not in f.commands]
    if not wrong:
        return
    lines = []
    for f in wrong:
        where = ", ".join(f"make {c}" for c in f.commands if c != "gpus") or "no make target"
        why = WHY_NOT.get(f.var, {}).get(command) or f"it is for {where}"
        value = "1" if f.switch else getattr(a, f.dest)
        lines.append(f"{f.var}={value} does not apply to `make {command}`: {why}")
    raise HarnessError("; ".join(lines) + ". Drop it and run again.")
