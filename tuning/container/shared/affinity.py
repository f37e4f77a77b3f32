"""Each rank on its own cores: the bench's CPU split, the same in every layout.

Standard library only: the host (bench, the Compose file's ``cpuset``, the host launcher)
and the ranks (`pin_rank`, first thing in tuning.sft_trainer and tuning.container.probe) share it.

``HARNESS_RANK_CPUS`` holds one CPU list per global rank, separated by ``;``, each as
cpuset takes it (``0``, ``2-3``, ``0,4``): e.g. ``0;1`` for two ranks on a 2-core machine.
A container gets the union of its ranks' lists as its cpuset; the host's launcher gets the
union of all; then every rank narrows itself to its own list (os.sched_setaffinity), so the
host, one container and a container per rank all run rank i on the same cores, with the
same OMP_NUM_THREADS. Unset: nothing is pinned.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

VAR = "HARNESS_RANK_CPUS"


def split(cpus: Iterable[int], world: int) -> list[list[int]]:
    """`world` contiguous, disjoint, equal shares of `cpus` (the remainder left idle, for the
    harness and the engine); with fewer CPUs than ranks, every rank shares all of them."""
    cpus = sorted(cpus)
    per = len(cpus) // world
    if per == 0:
        return [cpus] * world
    return [cpus[i * per : (i + 1) * per] for i in range(world)]


def parse_list(text: str) -> list[int]:
    """cpuset syntax, ``0-2,5`` -> [0, 1, 2, 5]."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def show(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> ``0,1,2,5`` (cpuset syntax; Compose's ``cpuset``)."""
    return ",".join(str(c) for c in sorted(cpus))


def encode(shares: list[list[int]]) -> str:
    return ";".join(show(s) for s in shares)


def decode(value: str) -> list[list[int]]:
    return [parse_list(s) for s in value.split(";")] if value else []


def union(value: str, ranks: Iterable[int]) -> str | None:
    """The cpuset of a node holding `ranks` (None when nothing is pinned)."""
    shares = decode(value)
    cpus = {c for r in ranks if r < len(shares) for c in shares[r]}
    return show(cpus) if cpus else None


def pin_rank(env: Mapping[str, str] = os.environ) -> list[int] | None:
    """Narrow this rank's process to its CPUs (its global RANK's list); the list, or None."""
    shares = decode(env.get(VAR, ""))
    rank = int(env.get("RANK", "0"))
    if rank >= len(shares) or not hasattr(os, "sched_setaffinity"):
        return None
    os.sched_setaffinity(0, shares[rank])
    return shares[rank]
