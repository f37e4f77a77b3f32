"""A soak's plan is pure: the same FAULT_SEED fails a job at the same steps (issue 32), its gaps
have the mean MTBF asks for, and where a failure strikes and the group resumes follow from the
kind and the save interval alone. Also the hold that makes a failure land at its step, the
flags' refusals, and the model's arithmetic. No engine."""

from __future__ import annotations

import json
import statistics
from types import SimpleNamespace

import pytest

from tuning.harness.bench.report_stats import poisson_interval
from tuning.harness.checks import save_interval
from tuning.harness.errors import HarnessError
from tuning.harness.faults.kinds import TABLE
from tuning.harness.faults.kinds.kind import Soak
from tuning.harness.soak import plan
from tuning.harness.soak.plan import Failure, Plan, schedule, strike
from tuning.harness.soak.record import renewal


def test_two_soaks_with_the_same_fault_seed_fail_at_the_same_steps():
    one = schedule(Plan(7, 60, 2, ("kill", "oom", "save-kill", "preempt")), 10, 40)
    two = schedule(Plan(7, 60, 2, ("kill", "oom", "save-kill", "preempt")), 10, 40)
    assert one == two
    other = schedule(Plan(8, 60, 2, ("kill", "oom", "save-kill", "preempt")), 10, 40)
    assert [x["step"] for x in other] != [x["step"] for x in one]


def test_the_nth_failure_does_not_depend_on_how_many_were_drawn_or_in_what_order():
    a, b = Plan(3, 50, 4, ("kill", "term")), Plan(3, 50, 4, ("kill", "term"))
    late = b.failure(30)
    assert [a.failure(n) for n in range(1, 31)][-1] == late
    assert a.failure(5) == b.failure(5)


def test_gaps_keep_to_the_seed_whatever_the_kinds_ranks_and_save_interval():
    gaps = [Plan(5, 80, 2, ("kill",)).failure(n).gap for n in range(1, 50)]
    assert gaps == [Plan(5, 80, 8, ("kill", "oom", "preempt")).failure(n).gap for n in range(1, 50)]
    # the same unit exponentials scaled by MTBF: a longer MTBF gives longer gaps, one by one
    longer = [Plan(5, 160, 2, ("kill",)).failure(n).gap for n in range(1, 50)]
    assert all(y >= x for x, y in zip(gaps, longer, strict=True))


def test_gaps_are_geometric_with_the_mean_mtbf_asks_for_and_hit_every_rank_and_kind():
    seeded = Plan(11, 40, 4, ("kill", "oom", "save-kill"))
    drawn = [seeded.failure(n) for n in range(1, 20001)]
    gaps = [f.gap for f in drawn]
    assert min(gaps) >= 1 and statistics.mean(gaps) == pytest.approx(40, rel=0.03)
    assert statistics.pstdev(gaps) == pytest.approx((40 * 39) ** 0.5, rel=0.05)  # geometric
    assert {f.rank for f in drawn} == {0, 1, 2, 3}
    assert {f.kind for f in drawn} == {"kill", "oom", "save-kill"}


@pytest.mark.parametrize(
    ("kind", "resumed", "gap", "expect"),
    [
        ("kill", 10, 25, (35, 30)),  # the newest save before the step
        ("kill", 10, 30, (40, 30)),  # held at the end of step 40, before its own save
        ("oom", 10, 1, (11, 10)),
        ("save-kill", 10, 25, (40, 30)),  # strikes inside the save of 40: torn
        ("save-kill", 10, 30, (40, 30)),
        ("term", 10, 25, (35, 36)),  # the group saves the next step and stops
        ("preempt", 36, 20, (56, 57)),
        ("kill", 57, 2, (59, 57)),  # resumed from a preempt's save, off the interval
    ],
)
def test_where_a_failure_strikes_and_the_group_resumes(kind, resumed, gap, expect):
    assert strike(Failure(1, gap, 0, kind), resumed, 10) == expect


def test_a_soak_draws_the_kinds_whose_table_entry_says_how_they_fail_the_group():
    assert set(plan.KINDS) == {"kill", "oom", "save-kill", "term", "preempt"}
    assert all(TABLE[name].soak is soak for name, soak in plan.KINDS.items())
    assert TABLE["oom"].soak.undo  # its lowered memory limit outlives the group's restart
    with pytest.raises(TypeError, match="a soak's hold takes"):
        Soak("end", "before")


def test_the_schedule_counts_each_gap_from_where_the_group_resumed():
    seeded = Plan(2, 30, 2, ("kill",))
    out = schedule(seeded, 10, 5)
    assert out[0]["from"] == plan.STARTS_AT
    for prev, nxt in zip(out, out[1:], strict=False):
        assert nxt["from"] == prev["resumes"] and nxt["step"] == nxt["from"] + nxt["gap"]


def test_the_hold_file_names_the_rank_and_step_and_the_trainer_holds_there(tmp_path, monkeypatch):
    from tuning.container.sft import fault_hooks

    path = tmp_path / "hold.json"
    monkeypatch.setenv("HARNESS_HOLD_FILE", str(path))
    assert not fault_hooks.hold("step", 1, 35)  # nothing written yet
    path.write_text(json.dumps(plan.hold(Failure(4, 25, 1, "kill"), 35)))
    released = SimpleNamespace(requested=True)  # SIGTERM came: the hold ends at once
    assert fault_hooks.hold("step", 1, 35, released)
    assert not fault_hooks.hold("step", 0, 35, released)  # another rank
    assert not fault_hooks.hold("step", 1, 34, released)  # another step
    assert not fault_hooks.hold("save", 1, 40, released)  # a kill is held at the step's end
    path.write_text(json.dumps(plan.hold(Failure(5, 25, 1, "save-kill"), 40)))
    assert fault_hooks.hold("save", 1, 40, released)  # in the save at or after the step
    assert not fault_hooks.hold("save", 1, 30, released)


@pytest.mark.parametrize(
    ("raw", "expect"),
    [
        ("3m", plan.Mtbf(seconds=180.0)),
        ("400steps", plan.Mtbf(steps=400)),
        ("90", plan.Mtbf(seconds=90.0)),
        ("12 step", plan.Mtbf(steps=12)),
    ],
)
def test_mtbf_is_a_time_or_steps(raw, expect):
    assert plan.mtbf_arg(raw) == expect
    assert plan.Mtbf(seconds=60.0).in_steps(0.25) == 240


@pytest.mark.parametrize(
    ("fn", "raw", "said"),
    [
        (plan.mtbf_arg, None, "MTBF is not set"),
        (plan.mtbf_arg, "3x", "MTBF='3x': use a time such as MTBF=3m"),
        (plan.mtbf_arg, "1steps", "at least 2 steps"),
        (plan.kinds_arg, "kill,pause", "pause not a soak's kind; use some of kill"),
        (save_interval.rate_arg, "lots", "GPU_HOURS_PER_FAILURE='lots': a positive number"),
        (save_interval.rate_arg, "-5", "a positive number"),
    ],
)
def test_bad_soak_flags_are_refused_with_the_fix(fn, raw, said):
    with pytest.raises(HarnessError, match=said):
        fn(raw)


def test_the_renewal_model_is_young_dalys_to_first_order():
    # far from failures both agree; at R/M ~ 0.1 the first order overstates the loss
    assert renewal(10, 0.01, 5, 1e5) == pytest.approx(save_interval.ett(10, 0.01, 5, 1e5), abs=1e-4)
    exact, first = renewal(13, 0.5, 20, 180), save_interval.ett(13, 0.5, 20, 180)
    assert exact > first and exact - first < 0.05


def test_poisson_interval_is_garwoods():
    lo, hi = poisson_interval(6, 0.95)
    assert (round(lo, 3), round(hi, 3)) == (2.202, 13.059)  # the tables' values
    assert poisson_interval(0, 0.95) == (0.0, pytest.approx(3.689, abs=1e-3))
