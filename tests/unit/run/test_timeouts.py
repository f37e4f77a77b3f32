"""Timeouts that fit the job (issue 30, item 4): the run's timeouts against each other and
against what a run of the job measured, each finding with what goes wrong and the value to set.
Runs are written as a trainer writes them (metrics lines), then read back."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from support.harness import harness
from support.run_records import a_run
from tuning.harness.checks import timeouts
from tuning.harness.checks.timeouts import Measured, Timeouts
from tuning.harness.faults.fault_json import FaultRecord


def test_timeouts_that_fit_say_nothing(tmp_path):
    m = timeouts.measured(a_run(tmp_path, "r", tmp_path / "job.yaml"))
    assert (m.median_step_s, m.slowest_step_s, m.save_s, m.rendezvous_spread_s) == (
        0.5,
        0.5,
        2.0,
        0.4,
    )
    assert timeouts.check(Timeouts.of({"ddp_timeout": 300}, stall_s=60), m) == []


def test_a_collective_timeout_shorter_than_the_slowest_save_says_the_value(tmp_path):
    m = timeouts.measured(a_run(tmp_path, "r", tmp_path / "j", save_s=42.0))
    (finding,) = timeouts.check(Timeouts.of({"ddp_timeout": 100}), m)
    assert finding == (
        "your slowest save took 42.0 s (run r) and the collective timeout is 100 s: ranks "
        "waiting in the next collective while one rank is that slow (a save a little slower on "
        "a cluster) time out and the job fails; set TIMEOUT=180 (ddp_timeout)"
    )


def test_the_stall_watch_against_the_collective_timeout_and_a_slow_evaluation(tmp_path):
    t = Timeouts.of({"ddp_timeout": 60}, stall_s=90)
    assert timeouts.check(t, None) == [
        "the stall watch waits 90 s, the collective timeout only 60 s: a stuck collective fails "
        "the ranks before the watch can say where they are; set STALL=30"
    ]
    m = timeouts.measured(a_run(tmp_path, "r", tmp_path / "j", eval_s=75.0))
    found = timeouts.check(Timeouts.of({}, stall_s=60), m)  # ddp_timeout unset: HF's 1800 s
    assert found == [
        "your slowest evaluation took 75.0 s (run r), longer than the stall time 60 s: the "
        "watch will dump every rank's stack during a healthy evaluation; set STALL=240"
    ]


def test_ranks_that_joined_far_apart_against_the_rendezvous_timeout(tmp_path):
    m = timeouts.measured(a_run(tmp_path, "r", tmp_path / "j", joined=(100.0, 330.0)))
    (finding,) = timeouts.check(Timeouts.of({}, rdzv_s=600), m)
    assert finding.startswith(
        "the ranks joined 230.0 s apart (run r) and the rendezvous waits 600 s"
    ) and finding.endswith("set RDZV_TIMEOUT=720")


def test_a_save_longer_than_a_pods_grace_period():
    m = Measured("r", 4.8, 5.2, 42.0, None, None)
    (finding,) = timeouts.check(Timeouts.of({}, grace_period_s=30), m)
    assert finding == (
        "a preempted pod gets 30 s (terminationGracePeriodSeconds) and your save took 42.0 s "
        "after a step of 5.2 s (run r): it will be killed mid-save; set "
        "terminationGracePeriodSeconds: 180 in the pod spec"
    )


def test_kube_warns_from_the_newest_run_of_the_same_job(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"max_steps": 10, "ddp_timeout": 600, "save_steps": 5}))
    runs = tmp_path / "runs"
    a_run(runs, "older", job, save_s=50.0)
    newest = a_run(runs, "newer", job, save_s=41.5)
    other = a_run(runs, "other-job", tmp_path / "other.yaml", save_s=2.0)
    import os

    os.utime(newest, (2e9, 2e9))  # newer than both
    os.utime(other, (2.1e9, 2.1e9))  # the newest of all, but another job
    out = harness("kube", "--gpus", "0", "--job", str(job), runs=runs)
    assert out.returncode == 0, out.stderr
    assert (
        "harness: timeouts (on the cluster): a preempted pod gets 30 s "
        "(terminationGracePeriodSeconds) and your save took 41.5 s after a step of 0.5 s "
        "(run newer): it will be killed mid-save; set terminationGracePeriodSeconds: 180 in "
        "the pod spec"
    ) in out.stdout


def test_the_save_interval_of_the_issues_example():
    """Young/Daly: tau = sqrt(2 C M), ETT = 1 - C/tau - (tau/2 + R)/M, worked by hand:
    M = 50,000 h / 512 = 351,562 s; tau = sqrt(2 x 40 x 351,562) = 5,303 s = 1 h 28 min;
    ETT = 1 - 40/5,303 - (2,652 + 180)/351,562 = 98.4 %."""
    from tuning.harness.checks.save_interval import Advice

    advice = Advice(512, 50_000, 40.0, 180.0, 4.8)
    assert round(advice.tau_s) == 5303 and advice.save_steps == 1105
    assert advice.sentence() == (
        "512 GPUs at one failure per 50,000 GPU-hours: a failure every 98 h; your save takes 40 s "
        "and a restart 3 min: save every 1 h 28 min (1,105 steps at your 4.8 s step); ETT 98.4 %"
    )
    # a sub-second save (the demo's soak: 0.14 s) is said as such, not "0 s"
    small = Advice(2, 50_677, 0.14, 6.1, 0.057).sentence()
    assert "your save takes 0.14 s and a restart 6 s: " in small, small


def test_kube_advises_the_save_interval_and_takes_it_on_request(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"max_steps": 10, "save_steps": 5}))
    runs = tmp_path / "runs"
    a_run(runs, "measured", job, step_s=4.8, save_s=40.0)
    args = ("--gpus", "8", "--nodes", "64", "--job", str(job), "--gpu-hours-per-failure", "50000")
    kept = harness("kube", *args, runs=runs)
    assert kept.returncode == 0, kept.stderr
    assert (
        "harness: save interval: 512 GPUs at one failure per 50,000 GPU-hours: a failure "
        "every 98 h; your save takes 40 s and a restart 3 min (assumed; run measured measured "
        "the save and the step): save every 1 h 28 min (1,105 steps at your 4.8 s step); ETT "
        "98.4 %"
    ) in kept.stdout

    def rendered_job(out) -> dict:
        manifest = Path(out.stdout.strip().splitlines()[-1])
        cm = next(d for d in yaml.safe_load_all(manifest.read_text()) if d["kind"] == "ConfigMap")
        return yaml.safe_load(cm["data"]["job.yaml"])

    assert rendered_job(kept)["save_steps"] == 5  # the user's job as it is, by default
    taken = harness("kube", *args, "--save-advised", runs=runs)
    assert taken.returncode == 0, taken.stderr
    assert rendered_job(taken)["save_steps"] == 1105


# --- make fault (issue 40, item 5) -----------------------------------------------------------
def a_fault_run(run_dir: Path, *, fault_at: float, save_s: float = 8.0) -> FaultRecord:
    """faults/record.py's build on a kill run of two ranks written as the trainer writes them:
    before the fault (t=16.5) steps of 0.2 s and a save of `save_s`; after it, a restart's
    rendezvous 60 s later and a 30 s step. Injection and follow as faults/follow.py sets them."""
    from types import SimpleNamespace

    from tuning.harness.faults import record as fault_record
    from tuning.harness.faults import write as fault_write
    from tuning.harness.faults.follow import Follow

    out = run_dir / "output/metrics"
    out.mkdir(parents=True)
    for rank in (0, 1):
        lines = [{"event": "phase", "name": "rendezvous", "rank": rank, "time": 1.0 + rank / 5}]
        for step in range(1, 15):
            lines.append(
                {"event": "step", "rank": rank, "step": step, "step_s": 0.2, "time": 2.0 + step}
            )
            if step == 5:
                save = {"event": "checkpoint", "rank": rank, "step": 5, "save_s": save_s}
                lines.append({**save, "time": 7.0 + save_s})
        lines += [
            {"event": "phase", "name": "rendezvous", "rank": rank, "time": 60.0},
            {"event": "step", "rank": rank, "step": 15, "step_s": 30.0, "time": 90.0},
            {"event": "end", "rank": rank, "status": "completed", "time": 91.0},
        ]
        (out / f"rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    knobs = {"rank": 1, "at_step": 12, "timeout_s": 20, "world_size": 2}
    follow = Follow("kill", "per-rank", "rank1", knobs, run_dir.name)
    follow.t0, follow.injected_at, follow.finished_at = 0.0, fault_at, 92.0
    follow.inject_step, follow.how = 14, "docker kill"
    nodes = [SimpleNamespace(name=f"rank{r}", ranks=[r], nproc=1) for r in (0, 1)]
    base = FaultRecord(
        run_dir.name,
        "kill",
        "per-rank",
        timeout_s=20,
        rdzv_timeout_s=20,
        rank=1,
        at_step=12,
        steps=60,
        max_restarts=0,
        world_size=2,
        step_sleep_s=0.2,
    )
    layout = SimpleNamespace(nodes=lambda: nodes)
    record = fault_record.build(base, follow, {"status": "failed"}, layout, run_dir, {})
    fault_write.write(run_dir, record)
    return record


def test_a_fault_run_checks_its_timeouts_against_what_came_before_the_fault(tmp_path, capsys):
    """As `make up` does (summary.json's "timeouts"): fault.json's "timeouts", said, and in
    fault.md. The fault's own slow step and the restart's late rendezvous are not counted."""
    record = a_fault_run(tmp_path / "f1", fault_at=16.5)
    said = (
        "your slowest save took 8.0 s (run f1) and the collective timeout is 20 s: ranks waiting "
        "in the next collective while one rank is that slow (a save a little slower on a "
        "cluster) time out and the job fails; set TIMEOUT=30 (ddp_timeout)"
    )
    assert record.timeouts == [said]
    assert f"harness: timeouts (what this run measured before the fault): {said}\n" in (
        capsys.readouterr().out
    )
    assert json.loads((tmp_path / "f1/fault.json").read_text())["timeouts"] == [said]
    md = (tmp_path / "f1/fault.md").read_text()
    assert f"- timeouts, against what the run measured before the fault: {said}\n" in md
    # saves that fit: said so; no step before the fault: said as not checked
    assert a_fault_run(tmp_path / "f2", fault_at=16.5, save_s=2.0).timeouts == []
    assert "- timeouts: fit what the run measured before the fault\n" in (
        (tmp_path / "f2/fault.md").read_text()
    )
    assert a_fault_run(tmp_path / "f3", fault_at=0.5).timeouts is None
    assert "- timeouts: not checked (no step was measured before the fault)\n" in (
        (tmp_path / "f3/fault.md").read_text()
    )


def test_a_fault_run_under_args_checks_the_trainers_own_collective_timeout():
    """ARGS is ENTRY's whole command line: TIMEOUT is then only the harness's wait."""
    from dataclasses import replace

    from tuning.harness.faults.record import _collective_s

    base = FaultRecord(timeout_s=20)
    assert _collective_s(base) == 20
    assert _collective_s(replace(base, trainer={"args": ["--ddp_timeout", "90", "--x"]})) == 90
    assert _collective_s(replace(base, trainer={"args": ["--ddp_timeout=45.5"]})) == 45.5
    assert _collective_s(replace(base, trainer={"args": []})) == timeouts.HF_DDP_TIMEOUT_S
