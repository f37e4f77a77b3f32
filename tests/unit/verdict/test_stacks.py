"""Stack dumps without Docker: real processes dump through tuning/container/rank/stack_dump.py
(faulthandler), the host's stacks/dumps.py signals and reads them (LAYOUT=host's way: a shell on
this machine), and stacks/stack_text.py parses real faulthandler text. The container path differs
only in where that shell runs (docker exec); tests/engine/faults/test_stacks_docker.py covers it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.launch import free_port
from support.paths import ENTRIES, ROOT
from support.stack_texts import BUSY, WAITING
from tuning.harness.stacks import dumps, hung, stack_text, stall

CHILD = """
import sys, threading, time
sys.path.insert(0, {root!r})
from tuning.container.rank import stack_dump
from tuning.harness.stacks import dumps
stack_dump.install({out!r}, {rank})
threading.Thread(target=lambda: time.sleep(1000), name="helper", daemon=True).start()
def deep():
    time.sleep(1000)  # DEEP
print("ready", flush=True)
deep()
"""


def _line(path: Path, marker: str) -> int:
    return next(i for i, x in enumerate(path.read_text().splitlines(), 1) if marker in x)


@pytest.fixture
def child(tmp_path):
    """A real Python process that registered its dump as rank 0, waiting in deep()."""
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=str(ROOT), out=str(tmp_path / "out"), rank=0))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    yield proc, script, tmp_path / "out"
    proc.kill()
    proc.wait()


def test_a_dump_names_where_each_rank_is_and_what_cannot_dump(child):
    proc, script, out = child
    taken = dumps.dump(out, [dumps.Node("host", [0, 1])], "test")
    deep = _line(script, "# DEEP")
    assert taken["summaries"] == [f"rank 0: in deep at {script}:{deep}", "rank 1: not registered"]
    rank0 = taken["ranks"][0]
    assert rank0["complete"] is True and rank0["collectives"] == []
    assert len(rank0["threads"]) == 3  # main, helper, the dump's own watcher
    main = stack_text.main_thread(rank0, dumps.registered(out)[0]["main_thread"])
    assert [f["func"] for f in main["frames"]] == ["deep", "<module>"]
    text = (out / "stacks/rank0.txt").read_text()
    assert text.startswith("=== stacks of rank 0 at ") and "(test) ===\n" in text
    assert proc.poll() is None  # SIGUSR1 with the handler in place: the process lives on


def test_a_stopped_rank_is_not_signalled_and_an_exited_one_is_said(child):
    proc, _, out = child
    os.kill(proc.pid, signal.SIGSTOP)
    stat = Path(f"/proc/{proc.pid}/stat")
    while stat.read_text().rsplit(")", 1)[1].split()[0] not in "Tt":  # delivered, not just sent
        time.sleep(0.05)
    try:
        taken = dumps.dump(out, [dumps.Node("host", [0])], "test")
        assert taken["summaries"] == ["rank 0: stopped (SIGSTOP: it cannot dump)"]
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    proc.kill()
    proc.wait()
    taken = dumps.dump(out, [dumps.Node("host", [0])], "test")
    assert taken["summaries"] == ["rank 0: exited"]
    assert not (out / "stacks/rank0.txt").read_text()  # nothing was ever dumped


def test_ranks_waiting_on_each_other_in_collectives(tmp_path):
    """tests/support/entries/hang_entry.py under the rank recorder and torchrun, as a foreign ENTRY
    runs: the summaries name the collective, the flight recorder's seq on gloo, and the user's line;
    torchrun's agent is never signalled and lives on."""
    out = tmp_path / "out"
    env = {
        **os.environ,
        "HARNESS_WRAPPED_ENTRY": "hang_entry",
        "HARNESS_OUTPUT_DIR": str(out),
        "PYTHONPATH": str(ENTRIES),
        "OMP_NUM_THREADS": "1",
    }
    torchrun = Path(sys.executable).with_name("torchrun")
    argv = [
        str(torchrun),
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        str(ROOT / "tuning/container/rank/rank_record.py"),
    ]
    log = tmp_path / "torchrun.log"
    agent = subprocess.Popen(argv, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while log.read_text().count("hang_entry: rank") < 2:
            assert agent.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        # Printed just before the collectives: dump until both ranks are seen inside them
        # (a dump is harmless; each one reads what the ranks show at that moment).
        while True:
            taken = dumps.dump(out, [dumps.Node("host", [0, 1])], "test")
            s0, s1 = taken["summaries"]
            if "waiting in" in s0 and "waiting in" in s1:
                break
            assert agent.poll() is None and time.monotonic() < deadline, taken["summaries"]
        entry = ENTRIES / "hang_entry.py"
        assert s0.startswith(
            f"rank 0: waiting in all_reduce (gloo, seq 2, pending) at {entry}:"
            f"{_line(entry, '# HANG_RANK0')} (torch/distributed/distributed_c10d.py:"
        )
        # gloo's flight recorder has no point-to-point entries: no seq for recv
        assert s1.startswith(
            f"rank 1: waiting in recv at {entry}:{_line(entry, '# HANG_RANK1')} "
            "(torch/distributed/distributed_c10d.py:"
        )
        assert [(c["op"], c["seq"], c["state"]) for c in taken["ranks"][0]["collectives"]] == [
            ("all_reduce", 1, "done"),
            ("all_reduce", 2, "pending"),
        ]
        assert agent.poll() is None
    finally:
        # SIGTERM: torchrun stops its workers (each in its own session) and then exits;
        # agent.kill() alone left both hung ranks running after CI
        agent.terminate()
        agent.wait(timeout=120)


def test_parse_reads_faulthandler_text_from_a_real_dump(tmp_path):
    """faulthandler's own output (dump_traceback of a real process), not a hand-written copy."""
    code = (
        "import faulthandler, sys\ndef f():\n    faulthandler.dump_traceback(sys.stdout, "
        "all_threads=True)\nf()\n"
    )
    text = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    parsed = stack_text.parse("noise before\n" + text)
    assert parsed["complete"] is False and parsed["collectives"] == []
    (thread,) = parsed["threads"]
    assert thread["current"] is True
    assert thread["frames"] == [
        {"file": "<string>", "line": 3, "func": "f"},
        {"file": "<string>", "line": 4, "func": "<module>"},
    ]
    assert stack_text.summary(3, parsed) == "rank 3: in f at <string>:3"
    assert stack_text.summary(4, {"threads": [], "collectives": []}) == (
        "rank 4: dumped no Python frame"
    )


def test_default_stall_time_is_a_multiple_of_the_step_time_with_a_floor():
    assert stall.default_limit([]) == 60.0  # before the steps' times are known
    assert stall.default_limit([0.5, 0.4, 9.0]) == 12.0  # steps of a second or less: 12 s
    assert stall.default_limit([1.0, 2.0, 3.0]) == 20.0
    assert stall.default_limit([8.0, 7.0, 30.0]) == 80.0


def test_fault_md_carries_the_summaries_and_each_rank_threads():
    taken = {
        "why": "fault run deadline",
        "time": "2026-01-01T00:00:00+00:00",
        "dump_s": 0.6,
        "summaries": [
            "rank 0: in deep at x.py:3",
            "rank 1: paused (its container is frozen: it cannot dump)",
        ],
        "ranks": {
            0: {"text": "=== h ===\nThread 0x1 (most recent call first):\n"},
            1: {"state": "paused"},
        },
    }
    assert dumps.markdown(taken) == [
        "",
        "## Stacks (fault run deadline, 2026-01-01T00:00:00+00:00, dumped in 0.6 s)",
        "",
        "- rank 0: in deep at x.py:3",
        "- rank 1: paused (its container is frozen: it cannot dump)",
        "",
        "### rank 0",
        "",
        "```",
        "=== h ===\nThread 0x1 (most recent call first):",
        "```",
    ]


def test_stacks_of_a_run_that_is_not_running_is_a_clear_error(tmp_path):
    run = tmp_path / "runs/r1"
    (run / "output/stacks").mkdir(parents=True)
    (run / "output/stacks/rank0.pid.json").write_text(
        json.dumps({"pid": 999999999, "rank": 0, "file": "x", "start_ticks": 1})
    )
    (run / "summary.json").write_text("{}")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuning.harness",
            "stacks",
            "--runs",
            str(tmp_path / "runs"),
            "--run-id",
            "r1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert out.stderr == (
        "harness: error: run r1 is not running (it ended: see its summary.json); "
        "`make stacks RUN_ID=<id>` takes a running one (`make ps` lists them)\n"
    )


def test_a_fault_record_keeps_stacks_only_for_a_hang_a_timeout_or_the_deadline():
    class Follow:  # what hung.record reads of fault_follow.Follow
        stopped_by = None
        hang_stacks = hung.HangStacks(15)

    follow = Follow()
    follow.hang_stacks.taken = {"summaries": ["rank 0: in f at x.py:1"]}
    assert hung.record(follow, timed_out=False) == {}  # ended normally: none
    assert hung.record(follow, timed_out=True) == {"stacks": follow.hang_stacks.taken}
    follow.stopped_by = "launcher lingered"
    assert hung.record(follow, timed_out=False) == {}
    for why in ("hang detected", "deadline"):
        follow.stopped_by = why
        assert hung.record(follow, timed_out=False) == {"stacks": follow.hang_stacks.taken}


def test_code_called_from_an_fsdp_hook_is_busy_not_waiting_in_a_collective():
    waiting, busy = (
        stack_text.position(stack_text.parse(WAITING)),
        stack_text.position(stack_text.parse(BUSY)),
    )
    assert waiting["call"] == "reduce_scatter_tensor"
    assert busy["call"] is None and busy["top"]["func"] == "main_process_work"
    assert stack_text.summary(3, stack_text.parse(BUSY)) == (  # the user's innermost frame
        "rank 3: in train at "
        "/opt/venv/lib/python3.11/site-packages/tuning/container/sft_trainer.py:620"
    )
