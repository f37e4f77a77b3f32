"""`make down`, `make ps` and every run act on this checkout's runs only (its RUNS folder), unless
ALL=1 (issue 28, part 5): a live run of a second checkout (another RUNS folder, real containers
training) survives this one's `make down`, the reaper of dead runs and a run under its run id,
and `make down ALL=1` removes it."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess

import pytest

from support.engine import leftovers
from support.harness import harness, wait_training
from support.paths import PYTHON, ROOT, TESTS

RUN_ID = f"scope-theirs-{secrets.token_hex(2)}"  # another session may run this test


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_make_down_is_scoped_to_runs_unless_all_is_typed():
    def dry(*args: str) -> str:
        return subprocess.run(
            ["make", "-n", "--no-print-directory", "down", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    assert "down --runs 'runs'" in dry() and "--all" not in dry()
    for value, passed in (("1", True), ("0", False), ("no", False)):
        assert ("--all" in dry(f"ALL={value}")) is passed, value


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


def test_a_run_carries_its_runs_folder_on_everything_compose_makes(tmp_path):
    from tuning.harness.backends import compose
    from tuning.harness.spec.layout import Layout

    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")  # a RUNS folder reached through a link: its real path
    layout = Layout(kind="per-rank", run_id="r", run_dir=str(link / "r"))
    want = {"harness.run": "r", "harness.runs": str((tmp_path / "real").resolve())}
    assert layout.labels == want
    doc = compose.render(layout)
    for svc in doc["services"].values():
        assert svc["labels"].items() >= want.items()
    assert doc["networks"]["train"]["labels"] == want


def test_a_runs_folder_holds_the_runs_in_folders_under_it_too():
    """A bench's layout runs live in its own folder under RUNS (runs/<bench>/<run>): `make
    down` of RUNS is theirs too; a sibling folder with a longer name is not."""
    from tuning.harness.backends.engine import within

    assert within("/a/runs", "/a/runs") and within("/a/runs/b-1", "/a/runs")
    assert within("/a/runs/b-1", "/a/runs/") and within("/a/runs/b-1/x", "/a/runs")
    assert not within("/a/runs2", "/a/runs") and not within("/a", "/a/runs")
    assert not within(None, "/a/runs")  # a container of a harness without the label


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
