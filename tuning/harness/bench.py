"""`make bench` (scaffold; being built)."""

from __future__ import annotations

import argparse

from .engine import HarnessError


def register(sub) -> None:
    p = sub.add_parser("bench", help="(not built yet)")
    p.set_defaults(fn=run)


def run(a: argparse.Namespace) -> int:
    raise HarnessError("bench is not built yet")
