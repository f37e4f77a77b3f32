"""REPEAT and BUDGET: how many rounds a bench runs (bench_rounds.Rounds) and which layouts each
runs, on rounds whose paired values are written here. The clock is a stand-in the test steps by
hand (the real one is time.monotonic), so the budget's arithmetic is checked without waiting.

A round's paired values (single/host step ratio, per-rank-shared/single busbw ratio, single -
host launch difference) are the goals' values to the last bit: host steps 1 s and launches in
0 s, single's busbw is 1."""

from __future__ import annotations

import pytest

from support.bench_report import LAYOUTS
from support.clock import Clock
from tuning.harness.bench import report
from tuning.harness.bench.rounds import MAX_ROUNDS, Rounds, budget_s
from tuning.harness.errors import HarnessError

CLEAR = {"step": 0.95, "busbw": 1.0, "launch": 0.5}  # every goal met, every round
EDGE = {"step": (1.0, 1.06), "busbw": (0.92, 0.98), "launch": (1.5, 2.5)}  # either side


def _value(v, rnd: int) -> float:
    return v[rnd % 2] if isinstance(v, tuple) else v


def _repeat(name: str, rnd: int, vals: dict) -> dict:
    step = _value(vals["step"], rnd) if name == "single" else 1.0
    launch = _value(vals["launch"], rnd) if name == "single" else 0.0
    busbw = _value(vals["busbw"], rnd) if name == "per-rank-shared" else 1.0
    return {
        "phases": {"launcher_s": launch},
        "step_s": [[step]],
        "tokens": [[1]],
        "probe": {"samples": [{"bytes": 4, "busbw_GBps": busbw}]},
    }


def bench(r: Rounds, vals, clock: Clock, round_s: float, layouts=LAYOUTS) -> tuple[dict, list]:
    """Drive r as bench.main does: each round runs the layouts r names and takes round_s;
    `vals` may be a function of the round. Returns the raw report and each round's layouts."""
    raw = {
        "meta": {"design": r.design_meta()},
        "layouts": [{"name": n, "repeats": []} for n in layouts],
    }
    by, seen = {lay["name"]: lay["repeats"] for lay in raw["layouts"]}, []
    while r.next_round(raw):
        rnd, names = r.done - 1, r.layouts(layouts)
        seen.append(names)
        for name in names:
            by[name].append(_repeat(name, rnd, vals(rnd) if callable(vals) else vals))
        clock.now += round_s
    return raw, seen


def test_budget_units_and_bad_values():
    assert [budget_s(x) for x in ("600", "90s", "10m", "1.5h", None)] == [600, 90, 600, 5400, 2760]
    for bad in ("ten", "0m", "-5s", "10d"):
        with pytest.raises(HarnessError, match=r"BUDGET=.*: use a positive time such as"):
            budget_s(bad)


def test_a_fixed_repeat_runs_that_many_rounds_and_looks_once():
    clock = Clock()
    for repeat in (2, 8):  # fewer and more than auto's least rounds
        r = Rounds(str(repeat), None, clock)
        raw, _ = bench(r, CLEAR, clock, 60)
        assert r.done == repeat and r.stopped == f"{repeat} round(s), as REPEAT asked."
    # 8 rounds, one look: 8 of 8 meet -> MET; the error the fixed look keeps, P(Bin(8) <= 1)
    assert [g["verdict"] for g in report.derive(raw)["goals"]] == ["MET"] * 3
    assert r.describe().startswith("8 round(s), one look after 8 rounds: each goal's 90 % ")
    assert "false MET and false MISSED are 3.5 % each" in r.describe()  # 9 / 256
    with pytest.raises(HarnessError, match="BUDGET applies to REPEAT=auto only"):
        Rounds("3", "10m")
    with pytest.raises(HarnessError, match="REPEAT='some': a whole number of rounds"):
        Rounds("some", None)


def test_auto_decides_no_goal_before_its_bounds_allow_it():
    """Every round clears every goal, yet the design decides only at round 9: 4 % spent
    linearly over 30 looks is 1.2 % by look 9, and 9 of 9 on one side, for rounds whose
    neighbours agree as the design allows (0.24), has chance 1.1 % (8 of 8: 1.8 %)."""
    clock = Clock()
    r = Rounds("auto", "10h", clock)
    raw, seen = bench(r, CLEAR, clock, 60)
    assert r.done == 9 and r.stopped == "REPEAT=auto: every goal resolved after 9 rounds."
    assert seen == [LAYOUTS] * 5 + [["host", "single", "per-rank-shared"]] * 4
    goals = report.derive(raw)["goals"]
    assert [(g["verdict"], g["pairs"], g["bound"]) for g in goals] == [("MET", 9, 0)] * 3
    assert "group-sequential sign test" in r.describe() and "3.8 % each" in r.describe()
    assert raw["meta"]["design"]["error_at_edge"] == 0.0384
    assert raw["meta"]["design"]["rho"] == 0.3


def test_auto_stops_when_the_next_round_would_pass_the_budget():
    """Goals at their edge (rounds alternate either side) never decide: rounds go on until the
    next one, at the rounds' mean duration so far, would end after the budget."""
    clock = Clock()
    r = Rounds("auto", "10m", clock)
    bench(r, EDGE, clock, 70)  # after 8 rounds 560 + 70 = 630 s > 600 s
    assert r.done == 8
    assert r.stopped == (
        "REPEAT=auto: the budget of 600 s ran out after 8 rounds (560 s); still unresolved: "
        "single/host steady step time, per-rank-shared/single busbw at largest size, "
        "single - host launch-to-first-step."
    )


def test_auto_stops_at_the_design_s_last_look_and_says_what_it_would_take():
    clock = Clock()
    r = Rounds("auto", "100h", clock)
    raw, _ = bench(r, EDGE, clock, 1)
    assert r.done == MAX_ROUNDS == 30
    assert r.stopped.startswith("REPEAT=auto: stopped at the most rounds (30); still unresolved")
    md = report.markdown(raw, report.derive(raw))
    step = next(ln for ln in md.splitlines() if ln.startswith("- UNRESOLVED: single/host"))
    assert step.endswith(
        "at round 30 (target <= 1.03, median of 30 paired ratios; 15 past the target, at most 7 "
        "to decide): unresolved: the interval spans the target, and the design's 30 looks are "
        "spent."
    )
    # the median (1.00 + 1.06) / 2 sits on the target: no number of rounds decides it
    assert "  - why: its paired rounds spread ±0.044 (1.4826 x their median absolute " in md
    assert "so about 50 % of rounds land past it; a fixed bench, looked at once, would " in md


def test_after_the_fifth_round_auto_runs_only_the_layouts_an_open_goal_reads():
    """The step goal at its edge, the other two clear: rounds 6 to 9 run the three layouts the
    goals read, and once busbw and launch are decided (round 9) host and single alone."""
    clock = Clock()
    r = Rounds("auto", "100h", clock)
    raw, seen = bench(r, {**CLEAR, "step": EDGE["step"]}, clock, 1)
    assert (
        seen
        == [LAYOUTS] * 5 + [["host", "single", "per-rank-shared"]] * 4 + [["host", "single"]] * 21
    )
    step, busbw, launch = report.derive(raw)["goals"]
    assert (step["pairs"], busbw["pairs"], launch["pairs"]) == (30, 9, 9)
    assert [g["verdict"] for g in (step, busbw, launch)] == ["UNRESOLVED", "MET", "MET"]
    assert launch["sentence"].endswith(
        "met. 21 later pairs, run for another goal, are not looked at."
    )


def test_a_decided_goal_keeps_its_verdict_whatever_later_pairs_say():
    """Launch decided MET at round 9; host and single go on for the step goal, and from round 10
    single launches 3 s later than host (past the 2 s target): not looked at."""
    clock = Clock()
    r = Rounds("auto", "100h", clock)
    late = {**CLEAR, "step": EDGE["step"], "launch": 3.0}
    raw, _ = bench(r, lambda rnd: {**CLEAR, "step": EDGE["step"]} if rnd < 9 else late, clock, 1)
    launch = report.derive(raw)["goals"][2]
    assert (launch["verdict"], launch["pairs"], launch["value"]) == ("MET", 9, 0.5)
    assert sum(v > 2.0 for v in launch["per_round"]) == 21  # a fixed look at 30 would miss it
