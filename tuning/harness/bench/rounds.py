"""How many rounds a bench runs: REPEAT=r rounds, or REPEAT=auto: rounds until every goal is
resolved (MET or MISSED, `report_goals`) or the time budget (BUDGET=46m) runs out.

Each has its stopping rule (`stopping`): REPEAT=r one look after its rounds (FIXED), auto a
look after every round under group-sequential bounds (SEQUENTIAL), whose error at a goal's edge
stays under 4 % each way however many of its looks it takes. Auto runs at least `MIN_ROUNDS`,
never starts a round that the rounds so far say would not end within the budget, and stops at
`MAX_ROUNDS` (the design's last look) whatever the budget. The reason it stopped goes into
report.json's meta (``stopped``) and report.md; the design into meta's ``design``.

After `MIN_ROUNDS`, a round runs only the layouts an unresolved goal reads (`layouts`): on two
shared cores a goal near its target takes 15-20 rounds, and a layout no open goal reads would
spend a quarter of each. A layout left out never comes back: each goal that reads it pairs it
with a layout, so its pairs stop growing and its verdict stays as it was.
"""

from __future__ import annotations

import time

from tuning.harness.bench.goal import Goal
from tuning.harness.bench.report_derive import derive
from tuning.harness.bench.report_goals import GOALS
from tuning.harness.bench.report_stats import MIN_PAIRS
from tuning.harness.bench.stopping import FIXED, SEQUENTIAL
from tuning.harness.errors import HarnessError
from tuning.harness.flags.run_flags import time_arg

DEFAULT_REPEAT = MIN_ROUNDS = MIN_PAIRS  # fewer rounds can never resolve a goal
MAX_ROUNDS = SEQUENTIAL.last
READS = {name: (layout, ref) for name, layout, ref, *_ in GOALS}  # goal -> its two layouts
# A cap: auto stops once every goal is decided. 46 min lets the design reach its 30th look on
# two cores: 5 rounds of four layouts (110-125 s) and 24 of the three the goals read (76-85 s)
# take 2,665 s at the top of those ranges, and the next round is judged at their mean, 92 s.
DEFAULT_BUDGET_S = 2760.0


def budget_s(raw: str | None) -> float:
    """BUDGET: seconds, or a number with s, m or h (``10m``, ``90s``, ``1.5h``)."""
    return time_arg("BUDGET", raw) or DEFAULT_BUDGET_S


class Rounds:
    """`next_round(raw)` before each round: whether to run it; `stopped` says why not."""

    def __init__(self, repeat: str | int | None, budget: str | None, clock=time.monotonic):
        self.auto = str(repeat).strip().lower() == "auto"
        if not self.auto and budget:
            raise HarnessError("BUDGET applies to REPEAT=auto only; drop it or set REPEAT=auto")
        if self.auto:
            self.planned, self.budget, self.design = MIN_ROUNDS, budget_s(budget), SEQUENTIAL
        else:
            self.planned, self.budget, self.design = _whole(repeat), None, FIXED
        self.clock = clock  # time.monotonic; a test's stand-in steps it by hand
        self.t0 = clock()
        self.done = 0
        self.stopped = ""
        self.open_layouts: set[str] | None = None  # None: every layout (the first rounds)

    def layouts(self, names: list[str]) -> list[str]:
        """The layouts the next round runs, in the bench's order."""
        keep = self.open_layouts
        return [n for n in names if keep is None or n in keep]

    def describe(self) -> str:
        """What the rounds are and the stopping rule's error: report.json's meta and the line
        the bench prints first."""
        if not self.auto:
            return f"{self.planned} round(s), {self.design.describe(self.planned)}"
        return (
            f"REPEAT=auto: at least {MIN_ROUNDS} rounds, then rounds until every goal is "
            f"resolved or the budget of {self.budget:.0f} s runs out (at most "
            f"{MAX_ROUNDS}), each after the {MIN_ROUNDS}th with only the layouts an "
            f"unresolved goal reads; {self.design.describe()}"
        )

    def design_meta(self) -> dict:
        """report.json's meta.design: the report decides its goals by the same rule."""
        return self.design.as_meta(None if self.auto else self.planned)

    def next_round(self, raw: dict) -> bool:
        elapsed = self.clock() - self.t0
        if not self.auto and self.done >= self.planned:
            self.stopped = f"{self.done} round(s), as REPEAT asked."
            return False
        per_round = elapsed / self.done if self.done else 0.0
        if self.auto and self.done >= MIN_ROUNDS:
            goals = map(Goal.from_json, derive(raw, self.design)["goals"])
            open_goals = [g.name for g in goals if g.verdict == "UNRESOLVED"]
            self.open_layouts = {n for g in open_goals for n in READS[g]}
            if not open_goals:
                self.stopped = f"REPEAT=auto: every goal resolved after {self.done} rounds."
            elif self.done >= MAX_ROUNDS:
                self.stopped = (
                    f"REPEAT=auto: stopped at the most rounds ({MAX_ROUNDS}); still "
                    f"unresolved: {', '.join(open_goals)}."
                )
            elif elapsed + per_round > self.budget:
                self.stopped = (
                    f"REPEAT=auto: the budget of {self.budget:.0f} s ran out after "
                    f"{self.done} rounds ({elapsed:.0f} s); still unresolved: "
                    f"{', '.join(open_goals)}."
                )
        if self.stopped:
            return False
        self.done += 1
        self.planned = max(self.planned, self.done)
        return True


def _whole(raw) -> int:
    if raw is None or raw == "":
        return DEFAULT_REPEAT
    try:
        n = int(raw)
    except ValueError:
        raise HarnessError(
            f"REPEAT={raw!r}: a whole number of rounds (e.g. REPEAT=5) or REPEAT=auto"
        ) from None
    if n < 1:
        raise HarnessError(f"REPEAT={n} must be at least 1, or REPEAT=auto")
    return n
