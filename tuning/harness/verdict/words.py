"""The verdict's way of naming ranks (rules.py, desync.py, torch_check.py); its shape is
record.py's `Verdict`."""

from __future__ import annotations


def ranks_text(ranks) -> str:
    """ "rank 3", "ranks 0, 1 and 2"."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"
