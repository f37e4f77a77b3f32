"""The verdict's shape and its way of naming ranks (rules.py, torch_check.py)."""

from __future__ import annotations


def ranks_text(ranks) -> str:
    """ "rank 3", "ranks 0, 1 and 2"."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


def verdict(kind: str, culprits, evidence: str, rule: str, **more) -> dict:
    """{"class", "culprits", "evidence", "rule": "torch" (torch's own check) | "hand", ...}."""
    return {"class": kind, "culprits": sorted(culprits), "evidence": evidence, "rule": rule, **more}
