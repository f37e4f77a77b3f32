"""no-show: a rank never joins. per-rank: Compose starts every node but its own, and the others
wait in torchrun's static rendezvous for RDZV_TIMEOUT. single: one agent spawns every local rank,
so its worker is frozen (SIGSTOP) as soon as it appears, before it joins the process group; the
others wait in the process-group store for TIMEOUT."""

from __future__ import annotations

import time

from tuning.harness.faults.kinds.kind import FAILS, Kind
from tuning.harness.faults.kinds.tools import freeze, worker_pid


def due(inj, metrics, nodes, now: float) -> list[tuple[str, int, float]]:
    if inj.per_rank:
        issued = nodes.issued_at or now
        return [(f"{inj.target} never started (compose up without it)", 0, issued)]
    ctr = nodes.container(inj.target)
    pid = worker_pid(ctr, inj.rank)
    if not pid:
        return []
    t = time.time()  # frozen before it can join the process group
    freeze(inj, ctr, pid)
    return [(f"SIGSTOP rank {inj.rank}'s worker (pid {pid}) before rendezvous", 0, t)]


def tick(follow, metrics, nodes, now: float) -> None:
    if follow.inject.heals and follow.peer_ended(metrics):
        # The peers gave up; thaw the frozen rank so its launcher can stop it (a frozen
        # process ignores SIGTERM, and torchrun would wait 30 s before SIGKILL).
        follow.event("a peer gave up at rendezvous; the frozen rank is released")
        follow.inject.release()


KINDS = (
    Kind(
        "no-show",
        80,
        due=due,
        tick=tick,
        held_back=True,
        expect=FAILS,
        judged="never arrived",
        pool_place=8,
    ),
)
