"""REPEAT and BUDGET: how many rounds a bench runs (bench_rounds.Rounds), on the hand-worked
profile of test_report_hand.py. The clock is a stand-in the test steps by hand (the real one is
time.monotonic), so the budget's arithmetic is checked without waiting."""

from __future__ import annotations

import pytest
from test_report_hand import SINGLE_STEP, profile

from tuning.harness.commands.bench.rounds import Rounds, budget_s
from tuning.harness.errors import HarnessError


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _rounds(r: Rounds, raw_for, clock: Clock, round_s: float) -> int:
    """Drive r as bench.main does: each round takes round_s; returns the rounds run."""
    while r.next_round(raw_for(r.done)):
        clock.now += round_s
    return r.done


def test_budget_units_and_bad_values():
    assert [budget_s(x) for x in ("600", "90s", "10m", "1.5h", None)] == [600, 90, 600, 5400, 1800]
    for bad in ("ten", "0m", "-5s", "10d"):
        with pytest.raises(HarnessError, match=r"BUDGET=.*: use a positive time such as"):
            budget_s(bad)


def test_a_fixed_repeat_runs_that_many_rounds():
    clock = Clock()
    for repeat in (2, 5):  # fewer and more than auto's least rounds
        r = Rounds(str(repeat), None, clock)
        assert _rounds(r, lambda n: profile(rounds=min(n, 3)), clock, 60) == repeat
        assert r.stopped == f"{repeat} round(s), as REPEAT asked."
    with pytest.raises(HarnessError, match="BUDGET applies to REPEAT=auto only"):
        Rounds("3", "10m")
    with pytest.raises(HarnessError, match="REPEAT='some': a whole number of rounds"):
        Rounds("some", None)


def test_auto_stops_once_every_goal_is_resolved():
    """Rounds 1-5 resolve every goal once single's step ratio is clear of 1.03."""
    clock = Clock()
    r = Rounds("auto", "10m", clock)
    clear = profile(5)
    for rep, s in zip(clear["layouts"][1]["repeats"], (0.55, 0.44, 0.66, 0.55, 0.55), strict=True):
        rep["step_s"] = [[s] * 3, [s] * 3]  # 1.10 every round: MISSED
    assert _rounds(r, lambda n: clear, clock, 60) == 5  # never before 5 rounds (a 90 % interval)
    assert r.stopped == "REPEAT=auto: every goal resolved after 5 rounds."


def test_auto_stops_when_the_next_round_would_pass_the_budget():
    """The hand profile's step goal stays UNRESOLVED: rounds go on until the next one, at the
    rounds' mean duration so far, would end after the budget."""
    clock = Clock()
    r = Rounds("auto", "7m", clock)
    unresolved = profile(5)
    assert SINGLE_STEP == (0.51, 0.42, 0.60, 0.505, 0.52)  # ratios 1.00 to 1.05 around 1.03
    # 70 s a round: after 5 rounds 350 + 70 = 420 s fits; after 6, 420 + 70 > 420 would not
    assert _rounds(r, lambda n: unresolved, clock, 70) == 6
    assert r.stopped == (
        "REPEAT=auto: the budget of 420 s ran out after 6 rounds (420 s); still unresolved: "
        "single/host steady step time."
    )


def test_auto_stops_at_the_most_rounds():
    clock = Clock()
    r = Rounds("auto", "100h", clock)
    assert _rounds(r, lambda n: profile(), clock, 1) == 30
    assert r.stopped.startswith("REPEAT=auto: stopped at the most rounds (30); still unresolved")


def test_after_the_fifth_round_auto_runs_only_the_layouts_an_open_goal_reads():
    """The hand profile after 5 rounds: step UNRESOLVED (host, single), busbw MISSED and launch
    MET. Round 6 on runs host and single only; the report then pairs 7 rounds for the step and
    keeps per-rank-shared's 5 for the busbw goal, whose verdict stays."""
    import copy

    from tuning.harness.commands.bench import report as rp

    clock, four = Clock(), ["host", "single", "per-rank-isolated", "per-rank-shared"]
    r = Rounds("auto", "100h", clock)
    raw = profile(5)
    seen = []
    for _ in range(7):
        assert r.next_round(raw)
        seen.append(r.layouts(four))
    assert seen == [four] * 5 + [["host", "single"]] * 2
    for lay in raw["layouts"][:2]:  # rounds 6 and 7 of host and single
        lay["repeats"] += copy.deepcopy(lay["repeats"][:2])
    step, busbw, launch = rp.derive(raw)["goals"]
    assert (step["pairs"], busbw["pairs"], launch["pairs"]) == (7, 5, 7)
    assert busbw["verdict"] == "MISSED" and rp.markdown(raw, rp.derive(raw))
