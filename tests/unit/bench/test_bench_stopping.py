"""REPEAT=auto's stopping rule keeps its error rate: simulated benches of known truth.

Each bench draws every round's paired value of the three goals (single/host step ratio <= 1.03,
per-rank-shared/single busbw ratio >= 0.95, single - host launch <= 2 s) around a true median
at the goal's edge, or a step to either side of it, with a per-round spread fixed or varying
round to round (between half and twice). Ratios are the truth times exp(spread x z), the launch
difference the truth plus spread x z (seconds: ten times the ratios' spreads, a launch being
about 10 s), z standard normal: the truth is the median either way.

1. The bench's own loop: rounds appended as `Rounds.next_round` and `Rounds.layouts` ask, the
   goals then read by `derive` from the raw samples. Every goal's verdict and deciding round
   is `stopping.decide` of its paired values, and the bench's rounds are what those say: the
   loop (layouts left out, pairs run for another goal, verdicts kept) is the rule.
2. The counts, through `stopping.decide` (shown in 1 to be the loop) over thousands of benches
   a condition: at the edge false MET and false MISSED stay under 5 % with room, everywhere,
   and agree with the rule's exact rate. The first-clear rule the bench had (its 90 % interval
   looked at after every round from 5) fails the same check.
3. Rounds that correlate (AR(1), 0.3 from one to the next): still under 5 %, where bounds set
   for independent rounds say a false verdict about 9 % of the time.

`PYTHONPATH=.:tests python tests/unit/bench/test_bench_stopping.py` prints the table of rates and
mean rounds."""

from __future__ import annotations

import functools
import itertools
import math
import random

from support.bench_report import LAYOUTS
from tuning.harness.bench import stopping
from tuning.harness.bench.goal import Decision
from tuning.harness.bench.report_derive import derive
from tuning.harness.bench.rounds import MAX_ROUNDS, MIN_ROUNDS, Rounds

SEQ = stopping.SEQUENTIAL
# (goal, target, op, by, step to either side of the edge, spread unit)
GOALS = (
    ("step", 1.03, "<=", "ratio", 0.03, 1.0),
    ("busbw", 0.95, ">=", "ratio", 0.03, 1.0),
    ("launch", 2.0, "<=", "difference", 0.3, 10.0),
)
SPREADS = (0.02, 0.06, 0.10)
EDGE_BENCHES, SIDE_BENCHES = 2500, 600


def draw(rng: random.Random, shift: int, spread: float, varying: bool) -> dict[str, list]:
    """One bench's paired values, MAX_ROUNDS of each goal; shift -1: the good side of the edge,
    0: on it, +1: past it."""
    out = {}
    for goal, target, op, by, step, unit in GOALS:
        sign = shift if op == "<=" else -shift
        truth, vals = target + sign * step, []
        for _ in range(MAX_ROUNDS):
            s = spread * unit * (2 ** rng.uniform(-1, 1) if varying else 1)
            z = rng.gauss(0, 1)
            vals.append(truth * math.exp(s / unit * z) if by == "ratio" else truth + s * z)
        out[goal] = vals
    return out


def _repeat(name: str, rnd: int, vals: dict) -> dict:
    """A layout's round: single/host step, launch single - host, busbw shared/single are the
    goals' values to the last bit (host: step 1, launch 0; single: busbw 1)."""
    step = {"single": vals["step"][rnd]}.get(name, 1.0)
    launch = {"single": vals["launch"][rnd]}.get(name, 0.0)
    busbw = {"per-rank-shared": vals["busbw"][rnd]}.get(name, 1.0)
    return {
        "phases": {"launcher_s": launch},
        "step_s": [[step]],
        "tokens": [[1]],
        "probe": {"samples": [{"bytes": 4, "busbw_GBps": busbw}]},
    }


def drive(vals: dict) -> tuple[Rounds, dict]:
    """A bench as bench.main runs it: a round of the layouts Rounds names, until it stops."""
    now = [0.0]
    r = Rounds("auto", None, lambda: now[0])
    raw = {
        "meta": {"design": r.design_meta()},
        "layouts": [{"name": n, "repeats": []} for n in LAYOUTS],
    }
    by = {lay["name"]: lay["repeats"] for lay in raw["layouts"]}
    while r.next_round(raw):
        for name in r.layouts(LAYOUTS):
            by[name].append(_repeat(name, r.done - 1, vals))
        now[0] += 80.0
    return r, raw


def test_the_bench_loop_decides_each_goal_as_the_rule_does():
    """36 benches, two a condition: the loop's goals are `decide`'s, goal by goal."""
    rng, seen = random.Random(40), set()
    conditions = itertools.product(SPREADS, (-1, 0, 1), (False, True), range(2))
    for spread, shift, varying, _ in conditions:
        vals = draw(rng, shift, spread, varying)
        r, raw = drive(vals)
        goals = derive(raw)["goals"]  # the design from meta, as report.write reads it
        looks = []
        for g, (goal, target, op, *_) in zip(goals, GOALS, strict=True):
            d = stopping.decide(vals[goal], target, op, SEQ)
            assert (g["verdict"], g["pairs"]) == (d.verdict, d.pairs), goal
            assert g["interval"] == d.interval and g["value"] == d.median
            looks.append(d.pairs if d.verdict != "UNRESOLVED" else MAX_ROUNDS)
            seen.add(d.verdict)
        assert r.done == max(MIN_ROUNDS, *looks)
        assert len(raw["layouts"][2]["repeats"]) == MIN_ROUNDS  # read by no goal
    assert seen == {"MET", "MISSED", "UNRESOLVED"}


def first_clear(vals: list[float], target: float, op: str) -> Decision:
    """The rule before this one: the fixed 90 % interval after every round from 5 to 30,
    stopping at the first that clears."""
    for n in range(MIN_ROUNDS, MAX_ROUNDS + 1):
        d = stopping.decide(vals[:n], target, op, stopping.FIXED)
        if d.verdict != "UNRESOLVED":
            break
    return d


@functools.cache
def counts(shift: int, spread: float, varying: bool, old: bool = False) -> dict:
    """goal -> (MET, MISSED, UNRESOLVED, mean deciding round, benches) over seeded benches,
    under the bench's rule (or the first-clear rule it had)."""
    n = 2000 if old else EDGE_BENCHES if shift == 0 else SIDE_BENCHES
    rng = random.Random(f"{shift} {spread} {varying}")
    tally = {g[0]: [0, 0, 0, 0] for g in GOALS}
    for _ in range(n):
        vals = draw(rng, shift, spread, varying)
        for goal, target, op, *_ in GOALS:
            if old:
                d = first_clear(vals[goal], target, op)
            else:
                d = stopping.decide(vals[goal], target, op, SEQ)
            t = tally[goal]
            t[("MET", "MISSED", "UNRESOLVED").index(d.verdict)] += 1
            t[3] += d.pairs if d.verdict != "UNRESOLVED" else MAX_ROUNDS
    return {g: (t[0] / n, t[1] / n, t[2] / n, t[3] / n, n) for g, t in tally.items()}


def upper(rate: float, n: int, z: float = 2.326) -> float:
    """Wilson's one-sided upper bound (99 % at z 2.326) of a binomial rate seen in n."""
    centre = rate + z * z / (2 * n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n))
    return (centre + half) / (1 + z * z / n)


def too_often(rates: dict) -> list[str]:
    """The errors at the edge seen 5 % of the time or more: a verdict either way is false."""
    return [
        f"{goal} false {what}"
        for goal, (met, missed, *_) in rates.items()
        for what, rate in (("MET", met), ("MISSED", missed))
        if rate >= 0.05
    ]


def test_at_the_edge_false_met_and_false_missed_stay_under_five_percent():
    assert SEQ.error() < 0.04  # for rounds correlated up to RHO
    exact = SEQ.independent_error()  # these draws' rounds are independent
    pooled = {g[0]: [0.0, 0.0, 0] for g in GOALS}
    for spread in SPREADS:
        for varying in (False, True):
            rates = counts(0, spread, varying)
            assert too_often(rates) == [], (spread, varying, rates)
            for goal, (met, missed, _, _, n) in rates.items():
                sd = math.sqrt(exact * (1 - exact) / n)  # the rate is exact whatever the noise
                assert abs(met - exact) < 4 * sd and abs(missed - exact) < 4 * sd
                p = pooled[goal]
                p[0], p[1], p[2] = p[0] + met * n, p[1] + missed * n, p[2] + n
    for goal, (met, missed, n) in pooled.items():  # 15,000 benches a goal: 99 % bounds
        assert upper(met / n, n) < 0.045 and upper(missed / n, n) < 0.045, goal


def ar1(rng: random.Random, n: int, rho: float) -> list[float]:
    """n standard normal rounds, each correlated rho with the one before (an AR(1))."""
    x, out = rng.gauss(0, 1), []
    for _ in range(n):
        out.append(x)
        x = rho * x + math.sqrt(1 - rho * rho) * rng.gauss(0, 1)
    return out


@functools.cache
def correlated(rho: float, design: stopping.Design, n: int = 4000) -> tuple[float, float]:
    """(false MET, false MISSED) of benches whose rounds correlate rho, at the edge."""
    rng, met, missed = random.Random(f"ar1 {rho}"), 0, 0
    for _ in range(n):
        vals = [1.03 * math.exp(0.06 * z) for z in ar1(rng, MAX_ROUNDS, rho)]
        v = stopping.decide(vals, 1.03, "<=", design).verdict
        met, missed = met + (v == "MET"), missed + (v == "MISSED")
    return met / n, missed / n


def test_rounds_correlated_0_3_keep_the_error_under_five_percent():
    """Neighbouring rounds alike (a machine slow for a few rounds): at a lag-1 correlation of
    0.3, 4000 benches at the edge say MET, and MISSED, under 5 % (99 % bounds)."""
    for rate in correlated(0.3, SEQ):
        assert upper(rate, 4000) < 0.05, rate
    # the check can fail: the same bounds set for independent rounds say each about 9 %
    independent = stopping.Design("sequential", stopping.ALPHA, stopping.FIRST, stopping.LAST)
    assert all(rate > 0.08 for rate in correlated(0.3, independent))


def test_the_report_measures_the_rounds_correlation():
    rng = random.Random(3)
    alike = stopping.lag1(ar1(rng, 400, 0.6))
    assert 0.5 < alike.r < 0.7 and alike.interval[0] > 0.3, alike
    apart = stopping.lag1([rng.gauss(0, 1) for _ in range(400)])
    assert apart.interval[0] < 0 < apart.interval[1], apart
    assert stopping.lag1([1.0, 1.1, 0.9]) is None  # too few rounds to say


def test_off_the_edge_the_wrong_verdict_is_rarer_still():
    for spread in SPREADS:
        for varying in (False, True):
            good, bad = counts(-1, spread, varying), counts(1, spread, varying)
            for goal in good:
                # a false MISSED, a false MET: rarer than at the edge
                assert good[goal][1] < SEQ.error() and bad[goal][0] < SEQ.error()
                assert good[goal][0] > bad[goal][0]  # MET tracks the truth
    assert counts(-1, 0.02, False)["step"][0] > 0.95  # 0.03 from the edge at 0.02: decided


def test_the_first_clear_rule_fails_the_same_check():
    """The check can fail: looking after every round with the fixed 90 % interval says MET
    (and MISSED) at the edge about 13 % of the time within 30 rounds."""
    old = counts(0, 0.06, False, old=True)
    assert len(too_often(old)) == 6 and all(met > 0.10 for met, *_ in old.values()), old


def table() -> str:
    rows = [
        "| goal | spread | varying | truth | MET | MISSED | UNRESOLVED | mean rounds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for goal, target, op, _, step, unit in GOALS:
        for spread in SPREADS:
            for varying in (False, True):
                for shift in (-1, 0, 1):
                    met, missed, unres, mean, n = counts(shift, spread, varying)[goal]
                    truth = target + (shift if op == "<=" else -shift) * step
                    rows.append(
                        f"| {goal} {op} {target} | {spread * unit:g} | "
                        f"{'yes' if varying else 'no'} | {truth:g} | {met:.1%} | "
                        f"{missed:.1%} | {unres:.1%} | {mean:.1f} |"
                    )
    return "\n".join(rows)


def minutes(rng, step_sd, step_truth, bw_sd, bw_truth, full=117.5, three=80.5, two=55.0):
    """One REPEAT=auto bench's minutes on this machine's figures (docs/benchmarks.md): 5 full
    rounds (four layouts, 110-125 s), then 80.5 s a round while the step or launch goal and the
    busbw goal are open (host, single, per-rank-shared: 76-85 s), 55 s while one side is
    (50-60 s). The launch goal (about -1 s against 2 s) decides at the first look it can."""
    ends = []
    for sd, truth, target, op in ((step_sd, step_truth, 1.03, "<="), (bw_sd, bw_truth, 0.95, ">=")):
        vals = [truth * math.exp(sd * rng.gauss(0, 1)) for _ in range(MAX_ROUNDS)]
        d = stopping.decide(vals, target, op, SEQ)
        ends.append(d.pairs if d.verdict != "UNRESOLVED" else MAX_ROUNDS)
    step_end, bw_end = max(ends[0], SEQ.first_decision()), ends[1]
    rounds = max(MIN_ROUNDS, step_end, bw_end)
    seconds = sum(
        full if n <= MIN_ROUNDS else three if step_end >= n and bw_end >= n else two
        for n in range(1, rounds + 1)
    )
    return seconds / 60, ends


if __name__ == "__main__":
    print(f"exact error at the edge: {SEQ.error():.4f}; bounds {stopping._bounds(SEQ)}")
    print(table())
    rng = random.Random(46)
    for step_sd in (0.058, 0.09, 0.131):  # the step ratio's p90/p10 1.16 to 1.40
        for step_truth, bw_truth in ((0.99, 1.0), (0.99, 1.04), (1.0, 1.0)):
            runs = sorted(minutes(rng, step_sd, step_truth, 0.096, bw_truth) for _ in range(2000))
            at = [runs[int(q * len(runs)) - 1][0] for q in (0.5, 0.8, 0.9, 1.0)]
            step_met = sum(e[0] < MAX_ROUNDS for _, e in runs) / len(runs)
            print(
                f"step sd {step_sd} truth {step_truth}, busbw truth {bw_truth}: minutes "
                f"median {at[0]:.1f}, p80 {at[1]:.1f}, p90 {at[2]:.1f}, most {at[3]:.1f}; "
                f"step decided {step_met:.0%}"
            )
