"""The scored pool's experiments (`make pool`, pool.py): fault runs, each verdict scored against
what was injected. Which kinds it runs and in what order, what each is judged (its verdict's
class), where it applies, which rank it always hits and the flags the pool adds for it are its
table entry's (faults/kinds/: `pool_place`, `judged`, `not_here`, `rank`, `pool_flags`).

- The committed list (`experiments()`, seed 30): 4 ranks, each kind of REGRESSION on rank 0 and
  on the last rank (or twice on the rank it always hits), in a layout and with a trainer the
  seed picks among those where the kind applies; the second run of a kind differs from the
  first in layout and trainer where the kind applies to both. Its size is twice REGRESSION's.
  A regression set: the rules were fit to it.
- A fresh draw (`draw(seed)`, `make pool SEED=n`): any scored kind, any rank, world sizes 2 to
  8, any step from 8 to 14, any layout and trainer where the kind applies (this repo's trainer,
  fms, or a user's own script: tests/user_scripts/train_sft.py with SRC, ENTRY and ARGS).
"""

from __future__ import annotations

import json
import random
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from tuning.harness.faults.kinds import TABLE
from tuning.harness.faults.kinds.desync import last_at_step
from tuning.harness.flags.trainers import FMS_JOB

SEED = 30  # the number: a fixed pool, not one picked after the fact
WORLD = 4
WORLDS = (2, 8)  # a fresh draw's world sizes, inclusive
DRAW_N = 24
TIMEOUT_S = 20  # the fault runs' default collective timeout (fault.DEFAULTS)
# The committed pool's kinds, by their entries' pool_place (its draws follow this order)
IN_POOL = [k for k in TABLE.values() if k.pool_place is not None]
REGRESSION = tuple(k.name for k in sorted(IN_POOL, key=lambda k: k.pool_place))
LAYOUTS, TRAINERS = ("single", "per-rank"), ("harness", "fms")
DRAWN_TRAINERS = (*TRAINERS, "script")
SCRIPT_SAVE_STEPS = 10
# a user's own HF script, unmodified (tests/user_scripts/train_sft.py: make fault takes it so)
SCRIPT = ("--src", "tests/user_scripts", "--entry", "train_sft.py")
SCRIPT_ARGS = (
    "--model_name_or_path /opt/harness/assets/tiny-model --train_file "
    f"/opt/harness/assets/demo.jsonl --output_dir /output --max_steps 30 --save_steps "
    f"{SCRIPT_SAVE_STEPS} --logging_steps 1 --per_device_train_batch_size 4 --learning_rate "
    f"3e-3 --ddp_timeout {TIMEOUT_S} --report_to none --seed 7"
)


@dataclass(frozen=True)
class Experiment:
    n: int
    kind: str
    rank: int
    layout: str
    trainer: str
    at_step: int
    world: int = WORLD

    @property
    def name(self) -> str:
        by = {"fms": ", fms", "script": ", a script"}.get(self.trainer, "")
        of = f" of {self.world}" if self.world != WORLD else ""
        return f"{self.kind} rank {self.rank}{of}, {self.layout}{by}"

    def typed(self) -> str:
        """As a user types it: make fault FAULT=kill RANK=0 ..."""
        words, flags = [], iter(self.flags())
        for flag in flags:
            value = next(flags)
            words.append(f"{flag[2:].upper().replace('-', '_')}={shlex.quote(value)}")
        return "make fault " + " ".join(words)

    def flags(self) -> list[str]:
        """The fault command's flags for this experiment."""
        out = [
            "--fault",
            self.kind,
            "--rank",
            str(self.rank),
            "--layout",
            self.layout,
            "--nproc",
            str(self.world),
            "--at-step",
            str(self.at_step),
        ]
        if self.trainer == "script":  # its timeout is its own --ddp_timeout, in ARGS
            out += [*SCRIPT, "--args", SCRIPT_ARGS]
        else:
            out += ["--timeout", str(TIMEOUT_S)]
        if self.trainer == "fms":
            out += ["--trainer", "fms"]
        return out + list(TABLE[self.kind].pool_flags)


def _places(kind: str, trainers=TRAINERS) -> list[tuple[str, str]]:
    """(layout, trainer) where the kind applies, by its table entry."""
    k = TABLE[kind]
    return [
        (layout, trainer)
        for layout in LAYOUTS
        for trainer in trainers
        if k.why_not(layout, "isolated", trainer != "harness") is None
    ]


def _at(rng: random.Random, kind: str, trainer: str) -> int:
    at = rng.randint(8, 14)
    if trainer != "harness" and TABLE[kind].refuse:  # a desync under DETAIL: before the
        at = min(at, _last_step(trainer))  # foreign trainer's first save (kinds/desync.py)
    return at


def experiments(seed: int = SEED) -> list[Experiment]:
    rng = random.Random(seed)
    out = []
    for kind in REGRESSION:
        places = _places(kind)
        first = rng.choice(places)
        apart = [p for p in places if p[0] != first[0] and p[1] != first[1]]
        picked = [first, rng.choice(apart or [p for p in places if p != first])]
        fixed = TABLE[kind].rank  # a kind that always hits one rank: that one, twice
        ranks = (fixed, fixed) if fixed is not None else (0, WORLD - 1)
        for rank, (layout, trainer) in zip(ranks, picked, strict=True):
            out.append(
                Experiment(len(out) + 1, kind, rank, layout, trainer, _at(rng, kind, trainer))
            )
    return out


def draw(seed: int, n: int = DRAW_N) -> list[Experiment]:
    """A fresh pool from `seed`: n runs, each kind, rank, world size, step, layout and trainer
    drawn (uniformly, where the kind applies)."""
    rng = random.Random(seed)
    kinds = [k.name for k in TABLE.values() if k.judged]
    out = []
    for i in range(n):
        kind = rng.choice(kinds)
        world = rng.randint(*WORLDS)
        fixed = TABLE[kind].rank
        rank = fixed if fixed is not None else rng.randrange(world)
        layout, trainer = rng.choice(_places(kind, DRAWN_TRAINERS))
        out.append(Experiment(i + 1, kind, rank, layout, trainer, _at(rng, kind, trainer), world))
    return out


def _last_step(trainer: str) -> int:
    """The latest AT_STEP `make fault` takes for a desync under DETAIL on this trainer's job."""
    saves = json.loads(FMS_JOB.read_text())["save_steps"] if trainer == "fms" else SCRIPT_SAVE_STEPS
    return last_at_step(saves)


def fault_argv(flags: list[str], run_id: str, runs_root: Path) -> list[str]:
    """A fault run as a user types it (`python -m tuning.harness fault ...`): how the pool and
    make repro's RUN=1 run theirs."""
    return [
        sys.executable,
        "-m",
        "tuning.harness",
        "fault",
        *flags,
        "--run-id",
        run_id,
        "--runs",
        str(runs_root),
    ]
