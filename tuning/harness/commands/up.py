"""`make up`: train one layout to the end (or, with --dry-run, print what would run)."""

from __future__ import annotations

import argparse

from tuning.harness.run import lifecycle, stall
from tuning.harness.spec import options, preflight
from tuning.harness.spec.flags import RunFlags


def register(sub) -> None:
    p = sub.add_parser("up", help="train one layout to the end")
    options.add_run_flags(p)
    p.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    p.add_argument("--stall", type=_seconds, default=None,
                   help="seconds without progress before every rank's stack is dumped "
                   "(default: max(60, 10 x the median step time); 0: never)")  # fmt: skip
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
    # A stalled run prints where every rank is (run/stall.py); it goes on, as it would without.
    watch = stall.StallWatch(a.stall, spec.summary_extra) if a.stall != 0 else None
    summary = lifecycle.start(spec, on_tick=watch)
    return lifecycle.EXIT_CODES.get(summary["status"], 1)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0 (STALL=120)")
    return value
