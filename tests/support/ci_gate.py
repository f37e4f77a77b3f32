"""What CI's gates read (tests/conftest.py): whether this is CI, and which skips a machine may
truly need. .ci/run sets CI itself, so the gates hold however it is started."""

from __future__ import annotations

import os

# What a machine may truly lack, said in the skip's reason: the kernel's sch_netem (delay and
# loss; no other qdisc delays packets, tbf only shapes). Any other skip in CI is red: a test
# skipped for want of an engine, of root or of ../shared proves nothing.
MACHINE_LIMITS = ("netem not supported by this kernel",)


def on() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def machine_limit(reason: str) -> bool:
    return any(limit in reason for limit in MACHINE_LIMITS)
