"""`python -m tuning.harness <command>`: what the Makefile's targets call. The parser and the
dispatch only: each command (commands/) adds its subcommand and the flags that are its own alone;
flags/flag_args.py puts every flag of flags/flag_table.py on every subcommand (its --help shows
those it takes, by group) and refuses by name one a command does not take; flags/run_flags.py types
them.
"""

from __future__ import annotations

import argparse
import sys

from tuning.harness.commands import (
    bench,
    examples,
    fault,
    gpus,
    housekeeping,
    image,
    kube,
    pool,
    repro,
    soak,
    stacks,
    up,
)
from tuning.harness.errors import HarnessError
from tuning.harness.flags import flag_args
from tuning.harness.layout import options


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tuning.harness")
    sub = p.add_subparsers(dest="command", required=True)
    commands = (
        up,
        bench,
        fault,
        soak,
        pool,
        repro,
        kube,
        examples,
        gpus,
        housekeeping,
        image,
        stacks,
    )
    for command in commands:
        command.register(sub)  # each adds its subcommand and the flags that are its own alone
    said = {a.dest: a.help for a in sub._choices_actions}  # each subcommand's one line
    for name, s in sub.choices.items():
        # every flag everywhere, its help only where taken: one a command cannot take is refused
        flag_args.add(s, name, runs=str(options.RUNS))
        # --help opens with what the command does and one example, as a user types it
        s.description = f"{said.get(name, '')}.\n\nexample:\n  {EXAMPLES[name]}"
        s.formatter_class = argparse.RawDescriptionHelpFormatter
    return p


# One example a command, as typed (the README's and the docs' own)
EXAMPLES = {
    "up": "make up GPUS=0 NPROC=2 LAYOUT=per-rank STEPS=20",
    "bench": "make bench GPUS=0 NPROC=2 REPEAT=auto JOB=myjob.yaml",
    "fault": "make fault FAULT=kill LAYOUT=per-rank RANK=1 AT_STEP=12",
    "soak": "make soak MTBF=3m DURATION=20m KINDS=kill,save-kill",
    "pool": "make pool SEED=3",
    "repro": "make repro FROM=sft-logs RUN=1 JOB=myjob.yaml",
    "kube": "make kube GPUS=8 NODES=2 IMAGE=quay.io/me/tuning:1 MODEL=pvc:models/granite OUT=-",
    "examples": "python -m tuning.harness examples",
    "gpus": "python -m tuning.harness gpus --check-driver",
    "down": "make down RUN_ID=20261207-071859-6191",
    "ps": "make ps ALL=1",
    "logs": "make logs RUN_ID=20261207-071859-6191",
    "image": "make image DEVICE=gpu CUDA=12.8",
    "stacks": "make stacks",
}


def glued(argv: list[str]) -> list[str]:
    """`--args VALUE` as `--args=VALUE`: ARGS is a command line whose words start with `-`,
    which argparse would otherwise take for an option of ours ("expected one argument")."""
    out, words = [], iter(argv)
    for word in words:
        out.append(f"{word}={next(words, '')}" if word == "--args" else word)
    return out


def parse(argv: list[str]) -> argparse.Namespace:
    return parser().parse_args(glued(argv))


def main(argv: list[str] | None = None) -> int:
    a = parse(sys.argv[1:] if argv is None else argv)
    options.load_env_file()
    try:
        flag_args.refuse_unused(a, a.command)
        return a.fn(a)
    except HarnessError as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
