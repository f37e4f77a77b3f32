"""`make soak` on the engine: one short seeded soak of 2 CPU ranks (issue 32). Its failures
strike at the steps its plan says (the pure plan of unit/faults/test_soak_plan.py: the same
FAULT_SEED fails at the same steps), the group resumes where the plan says, and the record
holds ETT with its interval, every failure's parts, the saves and the model. Times are
recorded, never asserted."""

from __future__ import annotations

import json

import pytest

from support.engine import leftovers
from support.harness import harness
from tuning.harness.soak import plan

PARTS = (
    "detect_s",
    "teardown_s",
    "restart_s",
    "imports_s",
    "rendezvous_s",
    "load_s",
    "first_step_s",
    "restart_cost_s",
    "work_lost_s",
)


@pytest.mark.docker
@pytest.mark.fault
@pytest.mark.slow
def test_a_seeded_soak_fails_where_its_plan_says_and_records_what_it_cost(tmp_path, harness_image):
    runs, kinds = tmp_path / "runs", ("kill", "save-kill")
    out = harness(
        "soak",
        "--run-id",
        "soak1",
        "--mtbf",
        "30steps",
        "--duration",
        "55s",
        "--save-every",
        "5",
        "--kinds",
        ",".join(kinds),
        "--fault-seed",
        "3",
        runs=runs,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rec = json.loads((runs / "soak1" / "soak.json").read_text())
    assert rec["plan"] == {"fault_seed": 3, "mtbf_steps": 30, "world_size": 2, "kinds": list(kinds)}
    failures = rec["failures"]
    assert failures, rec
    schedule = plan.schedule(plan.Plan(3, 30, 2, kinds), 5, len(failures))
    for f, want in zip(failures, schedule, strict=True):
        # held at its step: it lands exactly there, and the group resumes where the plan says
        assert (f["kind"], f["rank"], f["planned"], f["landed"]) == (
            want["kind"],
            want["rank"],
            want["step"],
            want["step"],
        )
        assert "resumed_unplanned" not in f
    back = [f for f in failures if f["resumed_from"] is not None]
    assert len(back) >= len(failures) - 1  # the last may strike as DURATION ends
    for f, want in zip(back, schedule, strict=False):
        assert f["resumed_from"] == want["resumes"]
        assert f["steps_lost"] == f["last_step"] - want["resumes"] >= 0
        assert all(f[k] is not None for k in PARTS), f
        assert f["restart_cost_s"] > 0 and f["work_lost_s"] >= 0
    assert 0 < rec["ett"] < 1
    lo, hi = rec["ett_interval"]
    assert lo <= rec["ett"] <= hi
    assert rec["saves"]["count"] > 0 and rec["saves"]["median_s"] > 0
    m = rec["model"]  # Young/Daly to first order, from the C, R, M and tau it recorded
    first = 1 - m["save_s"] / m["tau_s"] - (m["tau_s"] / 2 + m["restart_s"]) / m["mtbf_s"]
    assert m["ett"] == pytest.approx(first, abs=5e-3), m
    assert m["first_order_holds"] == (m["ett"] > 0)  # under load R can reach M: then <= 0
    assert 0 < m["ett_renewal"] < 1 and m["best_save_steps"] >= 1, m
    assert rec["final_step"] > plan.STARTS_AT
    assert rec["stop_reason"] == "soak stopped: DURATION reached"
    md = (runs / "soak1" / "soak.md").read_text()
    assert ("read the renewal figure" in md) == (not m["first_order_holds"])
    assert "ETT" in md and f"| {failures[0]['n']} | {failures[0]['kind']} |" in md
    assert (runs / "soak1" / "soak.png").stat().st_size > 0
    # Llama 3: 16,384 GPUs for 54 days, 419 failures: 16384 * 54 * 24 / 419 = 50,677 GPU-hours
    assert "harness: save interval: 2 GPUs at one failure per 50,677 GPU-hours" in out.stdout
    assert not leftovers("soak1", runs) and not rec["leftovers"]
