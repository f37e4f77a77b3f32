"""`python -m tuning.harness <command>`: what the Makefile's targets call. The parser and the
dispatch only: each command (commands/) adds its subcommand, and its flags become values in
spec/flags.py.
"""

from __future__ import annotations

import argparse
import sys

from tuning.harness.commands import bench, examples, fault, housekeeping, image, kube, stacks, up
from tuning.harness.errors import HarnessError
from tuning.harness.spec import devices, options


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tuning.harness")
    sub = p.add_subparsers(dest="command", required=True)
    for command in (up, bench, fault, kube, examples, devices, housekeeping, image, stacks):
        command.register(sub)  # each adds its subcommand, with add_run_flags where it runs jobs
    for s in sub.choices.values():
        options.add_common_flags(s)
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    options.load_env_file()
    try:
        return a.fn(a)
    except HarnessError as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
