"""pause: the rank is frozen (`docker pause` its container; in LAYOUT=single SIGSTOP its
worker) and thawed before teardown; its peers wait in their collective until TIMEOUT."""

from __future__ import annotations

from tuning.harness.faults.kinds.kind import HANGS, Kind
from tuning.harness.faults.kinds.tools import freeze


def pause(inj, nodes, ctr, pid) -> str:
    if inj.per_rank:
        ctr.pause()
        inj.heals.append(ctr.unpause)
        return f"docker pause {ctr.name}"
    freeze(inj, ctr, pid)
    return f"kill -STOP rank {inj.rank}'s worker (pid {pid}) in {ctr.name}"


KINDS = (Kind("pause", 70, inject=pause, expect=HANGS, judged="stopped or frozen", pool_place=5),)
