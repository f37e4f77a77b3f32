"""`make up`: train one layout to the end (or, with --dry-run, print what would run)."""

from __future__ import annotations

import argparse

from tuning.harness.run import lifecycle
from tuning.harness.spec import options, preflight
from tuning.harness.spec.flags import RunFlags


def register(sub) -> None:
    p = sub.add_parser("up", help="train one layout to the end")
    options.add_run_flags(p)
    p.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    spec = options.spec_from(RunFlags.of(a))
    if a.dry_run:
        if spec.plan and spec.plan.chosen:
            print(f"# gpus: {spec.plan.describe()}; driver {spec.plan.driver}")
        if spec.user_config:  # as a real run checks it, with accelerate's own loader
            preflight.check_accelerate_config(spec.accelerate_config, None)
        lifecycle.dry_run(spec.layout, spec.accelerate_config)
        return 0
    summary = lifecycle.start(spec)
    return lifecycle.EXIT_CODES.get(summary["status"], 1)
