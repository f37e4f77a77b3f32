"""The scored pool's experiments (`make pool`, pool.py): a fixed list, made from a seed, of
fault runs with 4 ranks, each kind on rank 0 and on the last rank, each in a layout and with
a trainer the seed picks among those where the kind applies: the second run of a kind differs
from the first in layout and trainer where the kind applies to both. What each kind is
expected to be judged: the verdict's class; its culprit is the rank the fault hit."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from tuning.harness.commands.fault.kinds import TABLE
from tuning.harness.commands.fault.kinds.desync import last_at_step
from tuning.harness.spec.trainers import FMS_JOB

SEED = 30  # the number: a fixed pool, not one picked after the fact
WORLD = 4
TIMEOUT_S = 20  # the fault runs' default collective timeout (fault.DEFAULTS)
LATE_S, LATE_RDZV_S = 40, 10  # late-master: rank 0 starts after the others gave up
# kind -> the class a right verdict gives it
EXPECTED = {
    "kill": "died", "crash": "died", "oom": "died", "save-kill": "died",
    "pause": "stopped or frozen", "slow": "slow", "partition": "network",
    "no-show": "never arrived", "late-master": "never arrived", "slow-main": "never arrived",
    # skip-collective: torch's DETAIL check (on for the desyncs) sees another op at that seq
    "skip-collective": "desync", "mismatch": "desync", "mismatch-shape": "desync",
}  # fmt: skip
# Where a kind cannot run (fault/__init__.py says why at run time): its layouts and trainers
PER_RANK_ONLY = ("partition", "late-master")  # a link between nodes, a master node
OURS_ONLY = ("crash",)  # a hook in this repo's trainer
LAYOUTS, TRAINERS = ("single", "per-rank"), ("harness", "fms")


@dataclass(frozen=True)
class Experiment:
    n: int
    kind: str
    rank: int
    layout: str
    trainer: str
    at_step: int

    @property
    def name(self) -> str:
        fms = ", fms" if self.trainer == "fms" else ""
        return f"{self.kind} rank {self.rank}, {self.layout}{fms}"

    def typed(self) -> str:
        """As a user types it: make fault FAULT=kill RANK=0 ..."""
        pairs = zip(self.flags()[::2], self.flags()[1::2], strict=True)
        return "make fault " + " ".join(f"{k[2:].upper().replace('-', '_')}={v}" for k, v in pairs)

    def flags(self) -> list[str]:
        """The fault command's flags for this experiment."""
        out = ["--fault", self.kind, "--rank", str(self.rank), "--layout", self.layout,
               "--nproc", str(WORLD), "--at-step", str(self.at_step),
               "--timeout", str(TIMEOUT_S)]  # fmt: skip
        if self.trainer == "fms":
            out += ["--trainer", "fms"]
        if self.kind == "late-master":
            out += ["--late", str(LATE_S), "--rdzv-timeout", str(LATE_RDZV_S)]
        return out


def _places(kind: str) -> list[tuple[str, str]]:
    layouts = ("per-rank",) if kind in PER_RANK_ONLY else LAYOUTS
    trainers = ("harness",) if kind in OURS_ONLY else TRAINERS
    return [(layout, trainer) for layout in layouts for trainer in trainers]


def experiments(seed: int = SEED) -> list[Experiment]:
    rng = random.Random(seed)
    out = []
    for kind in EXPECTED:
        places = _places(kind)
        first = rng.choice(places)
        apart = [p for p in places if p[0] != first[0] and p[1] != first[1]]
        picked = [first, rng.choice(apart or [p for p in places if p != first])]
        # late-master always hits rank 0 (the master); the others: rank 0 and the last
        ranks = (0, 0) if kind == "late-master" else (0, WORLD - 1)
        for rank, (layout, trainer) in zip(ranks, picked, strict=True):
            at = rng.randint(8, 14)
            if trainer == "fms" and TABLE[kind].refuse:  # a desync under DETAIL: before fms's
                at = min(at, _fms_last_step())  # first save (kinds/desync.py), as fault says
            out.append(Experiment(len(out) + 1, kind, rank, layout, trainer, at))
    return out


def _fms_last_step() -> int:
    """The latest AT_STEP `make fault` takes for a desync under DETAIL on fms's demo job."""
    return last_at_step(json.loads(FMS_JOB.read_text())["save_steps"])
