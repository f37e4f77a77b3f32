"""The kernel's boot time, as /proc/stat gives it (btime: whole unix seconds). Standard
library only: the trainer's metrics (container side) and bench's clock correction (host side)
read it here. tuning/container/rank/rank_record.py keeps its own copy: it is bound alone into
foreign images and must stay self-contained."""

from __future__ import annotations

from pathlib import Path


def boot_time() -> int:
    """btime from /proc/stat; OSError, StopIteration or ValueError where there is none."""
    return next(
        int(line.split()[1])
        for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime")
    )
