"""A soak's failures, drawn before they happen: pure (no engine, no clock), so the same
FAULT_SEED fails a job at the same steps every time.

Failures arrive as a Poisson process in the job's own time: the gap from the group's resume to
its next failure is exponential with mean MTBF, drawn in steps (MTBF over the measured step
time, or MTBF=<n>steps), i.e. geometric with mean `mtbf_steps`. Each failure hits a random rank
with a random kind of KINDS. Gaps, ranks and kinds come from three streams of their own, so
the same FAULT_SEED keeps its gaps whatever KINDS, the world size or the save interval are, and
the gaps scale with MTBF (one unit exponential per failure).

Where a failure strikes and where the group resumes follow from the kind (its table entry's
`soak`, faults/kinds/) and the save interval alone (`strike`): a kill at step s (the rank is held
at the end of step s until it is struck: tuning/container/sft/fault_hooks.hold, so its own save
never starts) resumes from the newest save before s; a save-kill strikes inside the first save at or
after s, which is torn, and resumes from the save before it; term and preempt stop the group at
step s + 1, which is saved, and resume there.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

from tuning.harness.errors import HarnessError
from tuning.harness.faults.kinds import TABLE
from tuning.harness.flags.run_flags import time_arg

# The kinds a soak draws from, in the table's order: those whose entry says how it fails the
# group so that it restarts (Kind.soak: where the rank is held, where the group resumes)
KINDS = {k.name: k.soak for k in TABLE.values() if k.soak}
NOT_IN_A_SOAK = (
    "a soak's failures end the group so that it restarts, each struck at a planned step; "
    "every other kind is a one-off experiment: make fault FAULT=<kind>"
)
STARTS_AT = 10  # the first failure's gap counts from this step: the step time is measured first


@dataclass(frozen=True)
class Failure:
    n: int  # 1, 2, ...
    gap: int  # steps the group makes after it resumed before this failure strikes
    rank: int
    kind: str


@dataclass(frozen=True)
class Mtbf:
    """MTBF as typed: a time (converted with the measured step time) or a number of steps."""

    seconds: float | None = None
    steps: int | None = None

    def in_steps(self, step_s: float | None) -> int:
        if self.steps:
            return self.steps
        return max(2, round(self.seconds / step_s))


def mtbf_arg(raw: str | None) -> Mtbf:
    if not raw:
        raise HarnessError(
            "MTBF is not set: the mean time between failures, e.g. MTBF=3m (or MTBF=400steps)"
        )
    m = re.fullmatch(r"\s*(\d+)\s*steps?\s*", str(raw))
    if m:
        if int(m[1]) < 2:
            raise HarnessError(
                f"MTBF={raw!r}: at least 2 steps (a failure every step never makes progress)"
            )
        return Mtbf(steps=int(m[1]))
    try:
        return Mtbf(seconds=time_arg("MTBF", raw))
    except HarnessError:
        raise HarnessError(
            f"MTBF={raw!r}: use a time such as MTBF=3m, 180s or 1h, or a number "
            "of steps such as MTBF=400steps"
        ) from None


def kinds_arg(raw: str | None) -> tuple[str, ...]:
    """KINDS=kill,oom,... (default kill): each a kind a soak can restart from."""
    kinds = tuple(dict.fromkeys(k.strip() for k in (raw or "kill").split(",") if k.strip()))
    wrong = [k for k in kinds if k not in KINDS]
    if wrong or not kinds:
        raise HarnessError(
            f"KINDS={raw!r}: {', '.join(wrong) or 'none'} not a soak's kind; use "
            f"some of {', '.join(KINDS)} ({NOT_IN_A_SOAK})"
        )
    return kinds


class Plan:
    """The failures of one soak: `failure(n)` (n = 1, 2, ...) is the same for the same seed,
    mean gap, world size and kinds, however many are drawn and in whatever order."""

    def __init__(self, seed: int, mtbf_steps: float, world_size: int, kinds: tuple[str, ...]):
        if mtbf_steps < 2:
            raise HarnessError(
                f"the mean gap between failures is {mtbf_steps} step(s); it must "
                "be at least 2 (raise MTBF)"
            )
        self.seed, self.mtbf_steps, self.world_size = seed, mtbf_steps, world_size
        self.kinds = kinds
        # ceil(Exp(lam)) is geometric with mean 1 / (1 - e^-lam): exactly mtbf_steps
        self._lam = -math.log(1 - 1 / mtbf_steps)
        self._streams = {w: random.Random(f"soak {seed} {w}") for w in ("gap", "rank", "kind")}
        self._drawn: list[Failure] = []

    def failure(self, n: int) -> Failure:
        while len(self._drawn) < n:
            unit = self._streams["gap"].expovariate(1.0)  # one per failure, whatever MTBF
            gap = max(1, math.ceil(unit / self._lam))
            rank = self._streams["rank"].randrange(self.world_size)
            kind = self._streams["kind"].choice(self.kinds)
            self._drawn.append(Failure(len(self._drawn) + 1, gap, rank, kind))
        return self._drawn[n - 1]

    def record(self) -> dict:
        return {
            "fault_seed": self.seed,
            "mtbf_steps": self.mtbf_steps,
            "world_size": self.world_size,
            "kinds": list(self.kinds),
        }


def strike(f: Failure, resumed: int, save_steps: int) -> tuple[int, int]:
    """(the step `f` strikes at, the step the group resumes from after it), for a group that
    resumed from step `resumed` and saves every `save_steps` (at their multiples)."""
    s, resumes = resumed + f.gap, KINDS[f.kind].resumes
    if resumes == "torn":
        torn = -(-s // save_steps) * save_steps  # the first save at or after s
        return torn, max(resumed, torn - save_steps)
    if resumes == "next":
        return s, s + 1
    return s, max(resumed, (s - 1) // save_steps * save_steps)


def schedule(plan: Plan, save_steps: int, count: int, start: int = STARTS_AT) -> list[dict]:
    """The first `count` failures as they would land: for each, its rank, kind, the step it
    strikes at, and the step the group resumes from (as `strike` says)."""
    out, resumed = [], start
    for n in range(1, count + 1):
        f = plan.failure(n)
        at, resumed_next = strike(f, resumed, save_steps)
        out.append(
            {
                "n": n,
                "rank": f.rank,
                "kind": f.kind,
                "gap": f.gap,
                "from": resumed,
                "step": at,
                "resumes": resumed_next,
            }
        )
        resumed = resumed_next
    return out


def hold(f: Failure, at: int) -> dict:
    """What HARNESS_HOLD_FILE says for `f` striking at step `at`
    (tuning/container/sft/fault_hooks.hold)."""
    return {"n": f.n, "rank": f.rank, "step": at, "at": KINDS[f.kind].hold}
