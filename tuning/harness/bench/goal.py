"""A bench goal as decided, as a type: `Goal` (report.json's derived.goals entry: its paired
figure, its interval and its verdict, report_goals.py), with what stopping.py says of its rounds:
the `Decision` at a look, the `Need` of an open goal, the rounds' `Lag1` correlation.
`Goal.to_json` is the one writer of a goal's dict in report.json, `Goal.from_json` the one
reader; no other module reads its keys.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Decision:
    """A goal's paired rounds under a design (stopping.decide): the look it was decided at
    (else the last seen), its verdict, that look's median and interval, how many rounds were
    past the target against the bound, and the rounds an open goal likely still needs."""

    verdict: str
    pairs: int
    median: float | None
    interval: list[float] | None
    past: int
    bound: int
    more_rounds: int


@dataclass(frozen=True)
class Need:
    """Why a goal is open (stopping.need): its rounds' spread, their median's distance to the
    target, the chance a round lands past it, the rounds a fixed bench needs and how often a
    REPEAT=auto bench decides it. All None under two rounds."""

    spread: float | None
    gap: float | None
    past_chance: float | None
    rounds_needed: int | None
    auto_decides: float | None


@dataclass(frozen=True)
class Lag1:
    """The paired rounds' lag-1 correlation, its 90 % interval, over n rounds (stopping.lag1)."""

    r: float
    interval: list[float]
    n: int


@dataclass(frozen=True)
class Goal:
    """One goal: its value (the paired rounds' median), interval, pairs looked at, every
    round's paired value, verdict (MET, MISSED, UNRESOLVED, NOT MEASURED), rounds it likely
    needs, the decision's counts (None where it was not measured), why it is open, its rounds'
    correlation, its sentence."""

    name: str
    target: str
    value: float | None
    interval: list[float] | None
    pairs: int
    per_round: list[float]
    verdict: str
    more_rounds: int
    past: int | None = None
    bound: int | None = None
    need: Need | None = None
    lag1: Lag1 | None = None
    sentence: str = ""

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "name": self.name,
            "target": self.target,
            "value": self.value,
            "interval": self.interval,
            "pairs": self.pairs,
            "per_round": self.per_round,
            "verdict": self.verdict,
            "more_rounds": self.more_rounds,
        }
        if self.past is not None:  # a goal not measured was never decided: no counts
            out.update(past=self.past, bound=self.bound)
        out["need"] = asdict(self.need) if self.need else None
        out["lag1"] = asdict(self.lag1) if self.lag1 else None
        out["sentence"] = self.sentence
        return out

    @classmethod
    def from_json(cls, d: dict) -> Goal:
        return cls(
            d["name"],
            d["target"],
            d["value"],
            d["interval"],
            d["pairs"],
            d["per_round"],
            d["verdict"],
            d["more_rounds"],
            d.get("past"),
            d.get("bound"),
            Need(**d["need"]) if d.get("need") else None,
            Lag1(**d["lag1"]) if d.get("lag1") else None,
            d["sentence"],
        )
