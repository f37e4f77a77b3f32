"""From a verdict read off a cluster's logs to the same failure here: the fault kind that
causes that class, struck on the culprit's role (rank 0; a rank on rank 0's node; a rank on
another node) mapped onto this box's ranks, at the step the logs show, on the user's own job.

The roles map so: one container of every rank (LAYOUT=single) is one node, so a rank on rank
0's node is another rank of that container; a container per rank (LAYOUT=per-rank) puts each
rank on a node of its own, so a rank of another node is another container. NPROC ranks here
stand for the cluster's world; the culprit becomes rank 0 or the last rank."""

from __future__ import annotations

from dataclasses import dataclass

from tuning.harness.clusterlogs.seen import Inputs
from tuning.harness.clusterlogs.source import Read
from tuning.harness.faults.kinds import TABLE
from tuning.harness.verdict.record import Verdict

ROLES = ("rank 0", "a rank on rank 0's node", "a rank on another node")


@dataclass(frozen=True)
class Replay:
    kind: str
    layout: str
    rank: int
    nproc: int
    at_step: int | None
    role: str  # the culprit's role on the cluster (ROLES)
    why: str  # why this kind, and how the world was mapped

    def flags(self) -> list[str]:
        out = [
            "--fault",
            self.kind,
            "--layout",
            self.layout,
            "--rank",
            str(self.rank),
            "--nproc",
            str(self.nproc),
        ]
        return out + (["--at-step", str(self.at_step)] if self.at_step else [])

    def typed(self, extra: str = "") -> str:
        words = [
            f"FAULT={self.kind}",
            f"LAYOUT={self.layout}",
            f"RANK={self.rank}",
            f"NPROC={self.nproc}",
        ] + ([f"AT_STEP={self.at_step}"] if self.at_step else [])
        return "make fault " + " ".join(words) + (f" {extra}" if extra else "")


def role(rank: int, nproc_per_node: int, nodes: int) -> str:
    if rank == 0:
        return ROLES[0]
    return ROLES[1] if rank // nproc_per_node == 0 or nodes == 1 else ROLES[2]


def kind_of(v: Verdict, inp: Inputs, foreign: bool) -> tuple[str | None, str]:
    """(the fault kind that causes the verdict's class on its culprit, why), or (None, why not)."""
    cls, culprit = v.kind, v.culprits[0] if v.culprits else None
    if culprit is None:
        return None, "no culprit named"
    ex = inp.exits.get(culprit) or {}
    if cls == "stopped from outside" or (cls == "died" and ex.get("outside")):
        return "term", "stopped from outside: SIGTERM to one rank, as an eviction or preemption"
    if cls == "died":
        if ex.get("oom"):
            return "oom", "the kernel's OOM killer: the rank's memory pushed past its limit"
        if ex.get("signal") == 11:
            return "segv", "a segfault (signal 11): the rank ends as native code's fault ends it"
        if ex.get("signal"):
            return "kill", f"signal {ex['signal']}: the rank killed (SIGKILL)"
        if "out of memory" in v.evidence or "OutOfMemoryError" in v.evidence:
            why = (
                "a CUDA out-of-memory exception is the rank's own error, not the kernel's OOM "
                "killer"
            )
            if foreign:
                return "kill", f"{why}; a trainer of your own has no hook to raise one: killed"
            return "crash", f"{why}: the trainer raises at the step"
        if foreign:
            return "kill", (
                "its own exception; a trainer of your own has no hook to raise "
                "one: the rank killed, which the verdict calls died alike"
            )
        return "crash", "its own exception: the trainer raises at the step"
    if cls == "never arrived":
        if not inp.nodes.get(culprit, {}).get("started", True):
            if culprit == 0:
                return "late-master", "rank 0's node started after the others gave up"
            return "no-show", "the rank's node never started"
        return "slow-main", "the rank busy outside the collective the others wait in"
    if cls == "desync":
        said = v.evidence
        if "TensorShape" in said or "shape" in said:
            return "mismatch-shape", "a collective of another size on the rank"
        if "left" in said or "skip" in said:
            return "skip-collective", "the rank skips a collective the others call"
        return "mismatch", "another collective on the rank at the same sequence number"
    kinds = {"stopped or frozen": "pause", "network": "partition", "slow": "slow"}
    if cls in kinds:
        return kinds[cls], f"{cls}: {kinds[cls]}"
    return None, f"no fault kind causes a verdict of {cls!r}"


def plan(
    v: Verdict, inp: Inputs, got: Read, nproc: int, foreign: bool, steps: int | None
) -> Replay | None:
    kind, why = kind_of(v, inp, foreign)
    if kind is None:
        return None
    culprit = v.culprits[0]
    per_node = next((c.nproc for c in got.containers), 1)
    nodes = max(1, -(-inp.world // per_node))
    r = role(culprit, per_node, nodes)
    layout = "single" if r == ROLES[1] or (r == ROLES[0] and nodes == 1) else "per-rank"
    why_not = TABLE[kind].why_not(layout, "isolated", foreign)
    if why_not and layout == "single":
        layout = "per-rank"
        why += f"; per-rank here ({why_not}), so the rank's role is another node's"
    rank = 0 if culprit == 0 else nproc - 1
    at = inp.step
    if at and steps:
        at = max(1, min(at, steps - 2))
    mapped = (
        f"the cluster's rank {culprit} of {inp.world} ({r}; {nodes} node(s) of {per_node} "
        f"rank(s)) is rank {rank} of {nproc} here, LAYOUT={layout}"
    )
    step = (
        f"at step {at}, where the logs' progress last showed {inp.step}"
        if inp.step
        else "at the fault's default step: the logs show no progress bar"
    )
    return Replay(kind, layout, rank, nproc, at, r, f"{why}; {mapped}; {step}")
