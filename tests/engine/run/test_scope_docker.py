"""`make down`, `make ps` and every run act on this checkout's runs only (its RUNS folder), unless
ALL=1 (issue 28, part 5): a live run of a second checkout (another RUNS folder, real containers
training) survives this one's `make down`, the reaper of dead runs and a run under its run id,
and `make down ALL=1` removes it; a test session removes what its own runs leaked, and nothing
else (without an engine: unit/run/test_scope.py)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess

import pytest

from support.engine import leftovers
from support.harness import harness, make, wait_training
from support.paths import PYTHON, ROOT, TESTS

RUN_ID = f"scope-theirs-{secrets.token_hex(2)}"  # another session may run this test


@pytest.mark.docker
@pytest.mark.slow
def test_a_second_checkouts_run_survives_this_ones_cleanups(tmp_path, harness_image):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"  # two checkouts' RUNS folders
    proc = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "tuning.harness",
            "up",
            "--gpus",
            "0",
            "--steps",
            "5000",
            "--run-id",
            RUN_ID,
            "--runs",
            str(theirs),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_training(theirs, RUN_ID, proc)
        assert len(leftovers(RUN_ID, theirs)) == 2  # its container and network
        running = set(leftovers(RUN_ID, theirs))

        # This checkout's cleanups, as the tests and a user run them: theirs is left alone.
        out = make("down", f"RUNS={mine}")
        assert out.returncode == 0, out.stderr
        assert "nothing to remove" in out.stdout and f"RUNS={mine}" in out.stdout, out.stdout
        assert "container(s) of other RUNS folders (other checkouts or users) alone" in out.stdout
        assert set(leftovers(RUN_ID, theirs)) == running and proc.poll() is None
        ps = make("ps", f"RUNS={mine}")
        assert RUN_ID not in ps.stdout and "nothing running" in ps.stdout, ps.stdout
        ps_all = make("ps", f"RUNS={mine}", "ALL=1")
        line = f"{RUN_ID}  harness-{RUN_ID}-trainer-1  running  {theirs.resolve()}"
        assert line in ps_all.stdout, ps_all.stdout

        # Its run id here: its Compose project would be taken over; refused, nothing written.
        same = harness("up", "--gpus", "0", "--steps", "2", "--run-id", RUN_ID, runs=mine)
        assert same.returncode == 2, same.stdout + same.stderr
        assert (
            f"RUN_ID={RUN_ID} is in use on this engine by a run of another RUNS folder "
            f"({theirs.resolve()})" in same.stderr
        )
        assert not (mine / RUN_ID).exists()

        # Its harness dies: a dead run, but another folder's; this one's reaper leaves it.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        out = make("down", f"RUNS={mine}", f"RUN_ID={RUN_ID}")
        assert out.returncode == 0 and "nothing to remove" in out.stdout, out.stdout
        assert set(leftovers(RUN_ID, theirs)) == running

        # ALL=1 (here with RUN_ID, so that nothing else on a shared engine is touched).
        out = make("down", f"RUNS={mine}", f"RUN_ID={RUN_ID}", "ALL=1")
        assert out.returncode == 0, out.stderr
        assert f"removed run {RUN_ID}: container harness-{RUN_ID}-trainer-1" in out.stdout
        assert leftovers(RUN_ID, theirs) == []
        summary = json.loads((theirs / RUN_ID / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["steps"] > 0  # buried, recorded
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        harness("down", "--run-id", RUN_ID, runs=theirs, timeout=120)


LEAK = """
import subprocess

import pytest


@pytest.mark.docker
def test_that_leaks(tmp_path):
    subprocess.run(["docker", "run", "-d", "--name", "LEAK_ID", "--network", "none",
                    "--label", "harness.run=LEAK_ID",
                    "--label", f"harness.runs={tmp_path / 'runs'}", "--entrypoint", "sleep",
                    "tuning-harness:latest", "300"], check=True)
"""


@pytest.mark.docker
def test_a_session_removes_what_its_own_runs_leaked_and_nothing_else(tmp_path, harness_image):
    """A test that leaves a container behind: the session names it, removes it and goes red;
    a container of another RUNS folder (outside the session's temp folder) stays."""
    import shutil

    session = tmp_path / "session"
    session.mkdir()
    shutil.copy(TESTS / "conftest.py", session / "conftest.py")  # support/ from PYTHONPATH
    leak_id = f"leak-{secrets.token_hex(2)}"
    (session / "test_leak.py").write_text(LEAK.replace("LEAK_ID", leak_id))
    other = subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--network",
            "none",
            "--label",
            f"harness.run={leak_id}",
            "--label",
            f"harness.runs={tmp_path / 'other-checkout/runs'}",
            "--entrypoint",
            "sleep",
            harness_image,
            "300",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        out = subprocess.run(
            [
                PYTHON,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                str(session),
                f"--basetemp={tmp_path / 'base'}",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])},
        )
        assert out.returncode == 1, out.stdout + out.stderr
        assert "1 thing(s) of this session's runs left on the engine (removed now):" in out.stdout
        assert f"  container {leak_id} of run {leak_id}" in out.stdout, out.stdout
        assert leftovers(leak_id) == [f"container {other[:12]}"]  # theirs, and only theirs
    finally:
        subprocess.run(["docker", "rm", "-f", other], capture_output=True)
