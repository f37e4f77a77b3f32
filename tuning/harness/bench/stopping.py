"""When a goal's paired rounds may say MET or MISSED: the bench's stopping rule, with its error
rate at the goal's edge.

Why the error is exact. A goal's interval is the order-statistic interval of the median of its
paired rounds, [x_(a+1), x_(n-a)] of n sorted rounds; it lies wholly on the target's good side
(MET) exactly when at most `a` rounds land past the target, wholly past it (MISSED) when at most
`a` rounds meet it. At a true median exactly at the target each round lands on either side as a
fair coin, whatever the noise's shape or spread, so the chance that a rule says MET there is a
fair binomial walk's chance to cross its bounds, computed here exactly (`_walk`). Pairing a
layout with its reference within a round takes the machine's drift out of the rounds' level, not
out of their order: a machine that stays slow for a few rounds makes neighbouring paired values
alike, and alike rounds cross a bound that assumes independent ones more often (AR(1) rounds at a
lag-1 correlation of 0.3 said MET 9 % of the time at the edge under independent bounds). So the
sequential walk is a Markov chain of "past the target" whose neighbours agree as the signs of
rounds correlated RHO (0.3) agree (Sheppard's 2/pi asin(RHO)), and its bounds are set for that
chain: the stated error holds for rounds up to RHO correlated, and the report measures each
goal's correlation (`lag1`).

- FIXED (REPEAT=r): one look, at the pairs there are; `a` the largest with
  P(Binomial(n, 1/2) <= a) <= 5 %: the 90 % interval (`report_stats`). False MET and false
  MISSED at the edge: 3.1 % at 5 rounds, 3.5 % at 8, 4.9 % at 30 (`Design.error`).
- SEQUENTIAL (REPEAT=auto): a group-sequential sign test. Looks after every round from FIRST
  (5) to LAST (30); at most ALPHA (4 %) of false MET, spent linearly over the looks
  (Lan-DeMets: ALPHA * n / LAST by look n); `a_n` the largest whose chance of a first crossing
  by look n, at the edge, stays within that, for rounds correlated up to RHO. Exact error at the
  edge: 3.8 % each way for such rounds, 0.8 % for independent ones (`Design.error`); the bounds
  set for independent rounds (3.7 % for those) said about 9 % for rounds correlated 0.3.
  Looking after every round with the fixed 90 % bound (the rule before both) said MET 13 % of
  the time at the edge within 30 rounds. The bounds are fixed in advance, so stopping early for the
  budget only drops looks and cannot raise the error; a goal keeps the verdict of its first
  deciding look (pairs run after it for another goal are not looked at).

Off the edge the spread sets how many rounds a decision takes: `need` estimates it from the
rounds seen (their median's distance to the target against their spread).
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import asdict, dataclass

from tuning.harness.bench.goal import Decision, Lag1, Need
from tuning.harness.bench.report_stats import (
    LEVEL,
    MAX_ROUNDS_SHOWN,
    MIN_PAIRS,
    clears,
    coverage,
    coverage_of,
    interval,
    meets,
    verdict,
)

FIRST, LAST = MIN_PAIRS, 30
# 4 %, not 5: its exact 3.7 % leaves room under 5 % for rounds a little less independent than
# the walk assumes, and lets a simulation of a few thousand benches show it below 5 %.
ALPHA = 0.04
POWER = 0.8  # "would resolve it 4 times in 5"
# the rounds' lag-1 correlation the sequential bounds hold their error for (the issue's 0.3;
# benches measured here: report.json's goals' lag1). Signs of rounds that correlated agree
# as 2/pi asin(RHO) (Sheppard); the chain's agreement is set a little above it, as an AR(1)'s
# signs keep more memory past one round than a Markov chain's (lag 2: 0.057 against 0.038)
RHO = 0.3
SIGN_MARGIN = 1.25
MAD_TO_SD = 1.4826  # a normal's standard deviation from its median absolute deviation


@dataclass(frozen=True)
class Design:
    kind: str  # "fixed": one look at the pairs there are; "sequential": a look every round
    alpha: float  # the most false MET (and false MISSED) at a goal's edge
    first: int = FIRST
    last: int | None = None  # sequential: its last look, the most rounds
    rho: float = 0.0  # the rounds' lag-1 correlation its bounds allow for

    @property
    def agree(self) -> float:
        """The lag-1 correlation of "past the target" its walk gives neighbouring rounds."""
        return min(SIGN_MARGIN * 2 / math.pi * math.asin(self.rho), 0.95)

    def bound(self, n: int) -> int:
        """At look n (pairs), the most rounds past (or short of) the target that still decide;
        -1: no decision at n."""
        if self.kind == "fixed":
            return _k_fixed(n) - 1
        return _bounds(self)[n] if self.first <= n <= self.last else -1

    def first_decision(self) -> int:
        return next(n for n in range(self.first, self.last or 1000) if self.bound(n) >= 0)

    def error(self, n: int | None = None) -> float:
        """The exact chance of a false MET (the same of a false MISSED) at a goal's edge: fixed,
        at n pairs; sequential, over all its looks, both bounds stopping it."""
        looks = [n] if self.kind == "fixed" else range(self.first, self.last + 1)
        return _walk(self, tuple(looks), 0.5)[0]

    def independent_error(self) -> float:
        """The same, for independent rounds (its bounds walked by a chain that forgets)."""
        return _walk(self, tuple(range(self.first, self.last + 1)), 0.5, r=0.0)[0]

    def as_meta(self, n: int | None = None) -> dict:
        return {
            **asdict(self),
            "error_at_edge": round(self.error(n or self.first), 4),
            "describe": self.describe(n),
        }

    def describe(self, n: int | None = None) -> str:
        if self.kind == "fixed":
            n = n or self.first
            if self.bound(n) < 0:
                return f"one look after {n} rounds: too few for a 90 % interval, nothing decided"
            return (
                f"one look after {n} rounds: each goal's {LEVEL:.0%} interval of the median;"
                f" at a goal's edge false MET and false MISSED are {self.error(n):.1%} each"
                " (exact, whatever the noise)"
            ).replace("%", " %")
        return (
            f"a group-sequential sign test: a look after every round from {self.first} to "
            f"{self.last}, {self.alpha:.0%} a side spent linearly over the looks, bounds "
            f"set for rounds correlated up to {self.rho:g}, so a decision can come from "
            f"round {self.first_decision()} on; at a goal's edge false MET and false MISSED "
            f"are {self.error():.1%} each (exact for a walk of rounds so correlated, whatever "
            "the noise; "
            f"{self.independent_error():.1%} for independent rounds); a goal keeps the "
            "verdict of its first deciding look"
        ).replace("%", " %")


FIXED = Design("fixed", (1 - LEVEL) / 2)
SEQUENTIAL = Design("sequential", ALPHA, FIRST, LAST, RHO)


def from_meta(meta: dict | None) -> Design:
    """A report's design (report.json's meta.design); without one, FIXED (older reports; a
    sequential one without rho: independent rounds)."""
    d = (meta or {}).get("design") or {}
    if not d.get("kind"):
        return FIXED
    return Design(d["kind"], d["alpha"], d["first"], d["last"], d.get("rho", 0.0))


@functools.cache
def _k_fixed(n: int) -> int:
    """The fixed look's k (1 + its bound); 0 where no k reaches LEVEL (under MIN_PAIRS)."""
    if n < 2 or coverage_of(n) < LEVEL:
        return 0
    return max(k for k in range(1, (n + 1) // 2 + 1) if coverage(n, k) >= LEVEL)


@functools.cache
def _bounds(d: Design) -> dict[int, int]:
    """Lan-DeMets bounds: at each look the largest a whose first crossings so far, at the
    edge and ignoring the other bound (which only stops walks sooner), stay within the
    alpha spent by then."""
    alive, spent, out = _start(0.5), 0.0, {}
    for n in range(1, d.last + 1):
        alive = _step(alive, 0.5, d.agree)
        if n < d.first:
            continue
        allowed, a, cum = d.alpha * n / d.last, -1, 0.0
        while a + 1 <= n and spent + cum + _at(alive, a + 1) <= allowed + 1e-12:
            a += 1
            cum += _at(alive, a)
        spent += cum
        out[n] = a
        alive = [[0.0 if s <= a else q for s, q in enumerate(side)] for side in alive]
    return out


def _start(p: float, past: int = 0, last: bool | None = None) -> list[list[float]]:
    """The walk's state: [by count when the last round met the target, ... when it was past].
    Before any round, the last one is drawn as a round would be (p)."""
    side = [0.0] * past + [1.0]
    if last is None:
        return [[q * (1 - p) for q in side], [q * p for q in side]]
    return [side, [0.0] * len(side)] if not last else [[0.0] * len(side), side]


def _at(dist: list[list[float]], s: int) -> float:
    """The chance that s rounds so far were past the target."""
    return dist[0][s] + dist[1][s] if 0 <= s < len(dist[0]) else 0.0


def _step(dist: list[list[float]], p: float, r: float = 0.0) -> list[list[float]]:
    """One more round: past the target with chance p, p + r(1 - p) after a round past it and
    p(1 - r) after one that met it (a chain at p whose neighbours correlate r)."""
    n = len(dist[0]) + 1
    out = [[0.0] * n, [0.0] * n]
    for last, side in enumerate(dist):
        up = p + r * (1 - p) if last else p * (1 - r)
        for s, q in enumerate(side):
            out[0][s] += q * (1 - up)
            out[1][s + 1] += q * up
    return out


@functools.cache
def _walk(
    d: Design,
    looks: tuple[int, ...],
    p: float,
    n0: int = 0,
    past0: int = 0,
    last0: bool | None = None,
    r: float | None = None,
):
    """From `past0` of `n0` rounds past the target (the last of them past: last0), each next
    round past it with chance p, neighbours agreeing r (the design's): (P(MET), P(MISSED),
    P(decided by each look)) with both bounds stopping the walk."""
    dist, n, met, missed, by = _start(p, past0, last0), n0, 0.0, 0.0, []
    r = d.agree if r is None else r
    for look in looks:
        while n < look:
            dist, n = _step(dist, p, r), n + 1
        a = d.bound(look)
        met += sum(_at(dist, s) for s in range(min(a + 1, look + 1)))
        missed += sum(_at(dist, s) for s in range(look - a, look + 1)) if a >= 0 else 0.0
        dist = [[q if a < s < look - a else 0.0 for s, q in enumerate(side)] for side in dist]
        by.append(met + missed)
    return met, missed, tuple(by)


def lag1(values: list[float]) -> Lag1 | None:
    """The paired rounds' lag-1 correlation, in round order, with a 90 % interval (its large-
    sample spread sqrt((1 - r^2) / n)); None under 4 rounds."""
    n = len(values)
    if n < 4:
        return None
    m = statistics.fmean(values)
    dev = [x - m for x in values]
    var = sum(x * x for x in dev)
    r = sum(a * b for a, b in zip(dev, dev[1:], strict=False)) / var if var else 0.0
    half = 1.645 * math.sqrt(max(1 - r * r, 0.0) / n)
    return Lag1(r, [max(r - half, -1.0), min(r + half, 1.0)], n)


def decide(values: list[float], target: float, op: str, design: Design) -> Decision:
    """The verdict of `values` (paired rounds in round order) under `design`: the look it was
    decided at (else the last look seen), that look's median, interval and counts."""
    if not values:
        return Decision("UNRESOLVED", 0, None, None, past=0, bound=-1, more_rounds=design.first)
    if design.kind == "fixed":  # one look: report_stats' 90 % interval and verdict
        med, iv, n = statistics.median(values), interval(values), len(values)
        tag, more = verdict(med, iv, target, op, n)
        past = sum(not meets(x, target, op) for x in values)
        return Decision(tag, n, med, list(iv) if iv else None, past, design.bound(n), more)
    # The walk counts (cheap after every round); the deciding look's interval then says the
    # same: at most a rounds past the target is its upper end meeting it, and so on.
    bounds, past, n = _bounds(design), 0, 0
    for n, x in enumerate(values[: design.last], 1):
        past += not meets(x, target, op)
        a = bounds.get(n, -1)
        if a >= 0 and (past <= a or n - past <= a):
            break
    a, head = bounds.get(n, -1), values[:n]
    iv = interval(head, a + 1 if a >= 0 else 1)  # before a bound exists: the whole range
    tag = (clears(iv, target, op) if a >= 0 else None) or "UNRESOLVED"
    more = _more(design, n, past, head, target, op) if tag == "UNRESOLVED" else 0
    return Decision(tag, n, statistics.median(head), list(iv) if iv else None, past, a, more)


def past_chance(values: list[float], target: float, op: str) -> tuple[float, float]:
    """(spread, chance a round lands past the target) if the rounds' median is the truth and
    their noise normal with the spread of their median absolute deviation."""
    med = statistics.median(values)
    sd = MAD_TO_SD * statistics.median(abs(x - med) for x in values)
    gap = (target - med) if op == "<=" else (med - target)  # > 0: the median meets it
    if sd == 0:
        return 0.0, 0.5 if gap == 0 else float(gap < 0)
    return sd, statistics.NormalDist().cdf(-gap / sd)


def _more(d: Design, n: int, past: int, values, target, op) -> int:
    """Rounds after look n before the design decides 4 times in 5 (either way), at the past
    chance its rounds so far say; MAX_ROUNDS_SHOWN + 1 when its looks end first."""
    if n < 2:
        return max(d.first_decision() - n, 1)
    if n >= d.last:
        return MAX_ROUNDS_SHOWN + 1
    p = past_chance(values, target, op)[1]
    last = not meets(values[-1], target, op)
    by = _walk(d, tuple(range(n + 1, d.last + 1)), round(p, 3), n, past, last)[2]
    return next((m for m, q in enumerate(by, 1) if q >= POWER), MAX_ROUNDS_SHOWN + 1)


@functools.cache
def rounds_needed(p: float) -> int:
    """The fewest rounds of a fixed bench (one look) that decide 4 times in 5 when each round
    lands past the target with chance p (either side of 1/2); MAX_ROUNDS_SHOWN + 1 past it."""
    p, dist = min(p, 1 - p), _start(min(p, 1 - p))
    for n in range(1, MAX_ROUNDS_SHOWN + 1):
        dist = _step(dist, p)
        if sum(_at(dist, s) for s in range(FIXED.bound(n) + 1)) >= POWER:
            return n
    return MAX_ROUNDS_SHOWN + 1


def need(values: list[float], target: float, op: str) -> Need:
    """Why a goal is unresolved and what it would take: its rounds' spread, their median's
    distance to the target, the chance a round lands past it, and the rounds a new fixed bench
    needs to decide 4 times in 5 (a pilot's figure: its rounds are not to be pooled)."""
    if len(values) < 2:
        return Need(None, None, None, None, None)
    sd, p = past_chance(values, target, op)
    looks = tuple(range(SEQUENTIAL.first, SEQUENTIAL.last + 1))
    met, missed, _ = _walk(SEQUENTIAL, looks, round(p, 3))
    return Need(
        spread=sd,
        gap=abs(statistics.median(values) - target),
        past_chance=p,
        rounds_needed=rounds_needed(round(p, 3)),
        auto_decides=met + missed,  # a new REPEAT=auto bench, within its last look
    )
