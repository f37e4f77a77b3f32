"""`make up`'s stall watch, fixed case by case (issue 30, item 5). The watch decides from the ranks'
metrics lines and the nodes' states on a clock (StallWatch.due); the dump itself is real
(tests/unit/verdict/test_stacks.py, test_stacks_docker.py). Each case below fired wrongly, or never,
before the fix."""

from __future__ import annotations

import subprocess
import sys

from support.clock import Clock
from support.paths import ROOT
from tuning.harness.stacks import dumps, stack_text, stall
from tuning.harness.verdict import live
from tuning.harness.verdict.record import Verdict
from tuning.harness.watch import Stop


def steps(rank: int, numbers, t0: float = 0.0, every_s: float = 1.0, step_s: float = 1.0):
    return [
        {"event": "step", "rank": rank, "step": n, "time": t0 + i * every_s, "step_s": step_s}
        for i, n in enumerate(numbers)
    ]


def watch() -> tuple[stall.StallWatch, Clock]:
    clock = Clock()
    return stall.StallWatch(None, {}, clock=clock, verdict=live), clock


RUNNING = {"trainer": None}


def test_a_trainer_that_logs_every_n_steps_is_not_stalled_between_its_lines():
    """fms logs every logging_steps: 10 steps of 4 s, one line per 40 s. The stall time is
    10 x the time between lines (400 s), not 10 x a step (it was 60 s: a false dump)."""
    w, clock = watch()
    metrics = {0: steps(0, [10, 20, 30], every_s=40.0, step_s=4.0)}
    assert w.due(metrics, RUNNING) is None
    assert w.limit(metrics) == 400.0
    clock.now += 100
    assert w.due(metrics, RUNNING) is None
    clock.now += 301
    assert w.due(metrics, RUNNING) == 401.0


def test_steps_replayed_after_a_restart_are_progress():
    """torchrun restarts the group from checkpoint-10 after step 12: steps 11 and 12 come
    again. The highest step does not move, the work does (it was no progress: a false dump)."""
    w, clock = watch()
    before = {0: steps(0, range(1, 13))}
    assert w.due(before, RUNNING) is None
    replay = {0: [*before[0], {"event": "phase", "name": "imports"}, *steps(0, [11], t0=60)]}
    clock.now += 59
    assert w.progressed(replay) is True


def test_nothing_is_watched_until_a_rank_has_written_its_first_line():
    """Containers starting and the launcher importing: not a stall yet."""
    w, clock = watch()
    assert w.due({}, RUNNING) is None
    clock.now += 600
    assert w.due({0: []}, RUNNING) is None
    metrics = {0: [{"event": "phase", "name": "imports"}]}
    assert w.due(metrics, RUNNING) is None  # the clock starts at the first line
    clock.now += 61
    assert w.due(metrics, RUNNING) == 61.0


def test_a_rank_stuck_in_rendezvous_stalls_whatever_c10d_prints():
    """Before the first step, only metrics lines are progress: c10d's periodic rendezvous
    retries in the node's log kept the watch quiet for ever."""
    w, clock = watch()
    metrics = {0: [{"event": "phase", "name": "imports"}]}
    assert w.due(metrics, RUNNING) is None
    clock.now += 61  # the nodes' logs grow meanwhile; the watch does not read them
    assert w.due(metrics, RUNNING) == 61.0
    clock.now += 30
    assert w.due(metrics, RUNNING) is None  # the next look a stall time after this one
    clock.now += 31
    assert w.due(metrics, RUNNING) == 122.0  # (a verdict that changed is said again)


def test_a_node_that_exited_does_not_turn_the_watch_off():
    """per-rank: rank 1's container exited, rank 0's runs on without progress (it used to
    count as 'ending', for good)."""
    w, clock = watch()
    metrics = {0: steps(0, [1, 2]), 1: steps(1, [1, 2])}
    state = {"rank0": None, "rank1": 0}
    assert w.due(metrics, state) is None
    clock.now += 61
    assert w.due(metrics, state) == 61.0
    assert w.due(metrics, {"rank0": 0, "rank1": 0}) is None  # nothing live: nothing to watch


SAVING = """
import sys, time
sys.path.insert(0, {root!r})
from tuning.container.rank import stack_dump
from tuning.harness.stacks import dumps
stack_dump.install({out!r}, 0)
def _save_checkpoint(model, trial):  # the HF Trainer's name for its save
    print("ready", flush=True)
    time.sleep(1000)  # SAVING
_save_checkpoint(None, None)
"""


def saving_dump(tmp_path):
    """(the dump, the script) of a real process in the HF Trainer's _save_checkpoint."""
    script, out = tmp_path / "saving.py", tmp_path / "out"
    script.write_text(SAVING.format(root=str(ROOT), out=str(out)))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        return dumps.dump(out, [dumps.Node("host", [0])], "test"), script
    finally:
        proc.kill()
        proc.wait()


def test_a_dump_during_a_long_save_names_the_save(tmp_path):
    """A slow phase that is still progressing is said as that phase, not as a stall."""
    taken, script = saving_dump(tmp_path)
    line = next(i for i, x in enumerate(script.read_text().splitlines(), 1) if "# SAVING" in x)
    assert stack_text.slow_phases(taken) == (
        f"rank 0 saving a checkpoint (in _save_checkpoint at {script}:{line})"
    )


def test_the_job_timeout_is_the_jobs_own_and_says_what_the_groups_got():
    groups = {r: [{"event": "phase", "name": "rendezvous", "timeout_s": 1800.0}] for r in (0, 1)}
    assert stall.collective_timeout(groups, 120.0, "ARGS' --ddp_timeout") == (
        120.0,
        "ARGS' --ddp_timeout; the ranks' process group got 1800 s",
    )
    assert stall.collective_timeout(groups, None, "") == (1800.0, "the ranks' process group")
    assert stall.collective_timeout({0: []}, None, "") == (1800.0, "torch's default")


class Nodes:
    """What the watch's ending hands dumps.take: no rank can be dumped here (None)."""


def test_a_hang_is_ended_past_the_timeout_and_grace_unless_hang_wait(monkeypatch):
    """Once the stall is said, every rank still without progress at the timeout + 30 s: the
    watch returns "stop" with the reason, and records the hang; a node that exited, or
    HANG=wait, leaves the run to the follow."""
    monkeypatch.setattr(dumps, "take", lambda *a, **k: None)
    for hang, state, stops in (
        ("end", RUNNING, True),
        ("wait", RUNNING, False),
        ("end", {"rank0": None, "rank1": 1}, False),
    ):
        clock = Clock()
        extra: dict = {}
        w = stall.StallWatch(
            None, extra, clock=clock, timeout_s=20.0, timeout_said="x", hang=hang, verdict=live
        )
        metrics = {0: steps(0, [1, 2, 3])}
        assert w(metrics, state, Nodes()) is None
        w.reported = True  # the stall said (its dump is test_stacks.py's)
        clock.now += 49
        assert w(metrics, state, Nodes()) is None
        clock.now += 2
        got = w(metrics, state, Nodes())
        assert isinstance(got, Stop) == stops, (hang, state)
        if stops:
            assert w.stop_reason.startswith("hung past its timeout (20 s, x)")
            assert extra["hang"]["ended_after_timeout_s"] == 31.0


def test_a_long_save_is_a_slow_phase_not_a_stall(tmp_path, monkeypatch, capsys):
    """Steps of a second, then a save of minutes: the watch looks at 12 s, the real stack of
    the saving rank says it saves, and nothing is reported or recorded as a stall."""
    taken, _ = saving_dump(tmp_path)
    monkeypatch.setattr(dumps, "take", lambda *a, **k: taken)
    nobody = Verdict("unknown", [], "no rank stands out", "none")
    monkeypatch.setattr(live, "judge_live", lambda *a: nobody)
    clock = Clock()
    extra: dict = {}
    w = stall.StallWatch(None, extra, clock=clock, timeout_s=1800.0, timeout_said="x", verdict=live)
    metrics = {0: steps(0, range(1, 30))}
    assert w(metrics, RUNNING, Nodes()) is None
    clock.now += 13
    assert w(metrics, RUNNING, Nodes()) is None
    said = capsys.readouterr().out
    assert "in a slow phase, not a hang: rank 0 saving a checkpoint" in said
    assert "no rank has logged progress" not in said and "stall" not in extra
