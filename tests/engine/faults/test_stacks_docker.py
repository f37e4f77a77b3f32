"""Stacks on the engine (a paused rank's fault run and its stacks: test_fault_docker.py): a foreign
ENTRY whose ranks wait on each other stalls `up`, which prints the stacks by itself and keeps
them; `stacks` dumps a running run on demand; a normal run carries none of it."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from support.engine import leftovers
from support.harness import harness
from support.paths import ENTRIES, PYTHON, ROOT

# the harness image + support/entries/hang_entry.py: a user's image
HANG_IMAGE = "tuning-harness-hang:test"


@pytest.mark.docker
@pytest.mark.slow
def test_a_normal_run_carries_no_stacks(harness_image, tmp_path):
    out = harness(
        "up", "--layout", "single", "--steps", "4", "--run-id", "stacks-normal", runs=tmp_path
    )
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((tmp_path / "stacks-normal/summary.json").read_text())
    assert "stall" not in summary and "stacks (" not in out.stdout
    dumps = sorted((tmp_path / "stacks-normal/output/stacks").glob("rank*.txt"))
    assert [p.name for p in dumps] == ["rank0.txt", "rank1.txt"]  # registered, never dumped
    assert all(p.read_text() == "" for p in dumps)


@pytest.fixture(scope="module")
def hang_image(harness_image, tmp_path_factory) -> str:
    ctx = tmp_path_factory.mktemp("hang-image")
    for name in ("hang_entry.py", "exit_hang_entry.py"):
        (ctx / name).write_text((ENTRIES / name).read_text())
    (ctx / "Dockerfile").write_text(
        f"FROM {harness_image}\nCOPY hang_entry.py exit_hang_entry.py "
        "/opt/venv/lib/python3.11/site-packages/\n"
    )
    subprocess.run(
        ["docker", "build", "-q", "-t", HANG_IMAGE, str(ctx)], check=True, capture_output=True
    )
    return HANG_IMAGE


@pytest.mark.docker
@pytest.mark.slow
def test_a_stalled_up_prints_the_stacks_by_itself_and_stacks_on_demand(hang_image, tmp_path):
    run_id = "stacks-stall"
    up = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "tuning.harness",
            "up",
            "--layout",
            "per-rank",
            "--image",
            hang_image,
            "--entry",
            "hang_entry",
            "--stall",
            "20",
            "--run-id",
            run_id,
            "--runs",
            str(tmp_path),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen, deadline = [], time.monotonic() + 240
    try:
        while not any(x.startswith("  rank 1: ") for x in seen):
            line = up.stdout.readline()
            assert line and time.monotonic() < deadline, "".join(seen)
            seen.append(line)
        printed = [x.strip() for x in seen if x.startswith("  rank ")]
        assert printed[0].startswith("rank 0: waiting in all_reduce (gloo, seq 2, pending) at ")
        assert printed[1].startswith("rank 1: waiting in recv at ")
        assert any("no rank has logged progress for" in x for x in seen), "".join(seen)
        assert up.poll() is None  # the run goes on after the dump
        demand = harness("stacks", "--run-id", run_id, runs=tmp_path)
        assert demand.returncode == 0, demand.stdout + demand.stderr
        lines = [x.strip() for x in demand.stdout.splitlines() if x.startswith("  rank ")]
        assert [x.split(" at ")[0] for x in lines] == [
            "rank 0: waiting in all_reduce (gloo, seq 2, pending)",
            "rank 1: waiting in recv",
        ]
    finally:
        up.send_signal(signal.SIGINT)
        rest = up.communicate(timeout=120)[0]
    run = tmp_path / run_id
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted", rest
    stall = summary["stall"]
    assert stall["summaries"] == printed and stall["stall_s"] == 20.0 and stall["spells"] == 1
    # the watch's first look, `make stacks`, and a look again each stall time (quietly)
    assert (run / "output/stacks/rank0.txt").read_text().count("=== stacks of rank 0") >= 2
    assert leftovers(run_id) == []
    gone = harness("stacks", "--run-id", run_id, runs=tmp_path)
    assert gone.returncode == 2 and "is not running (it ended" in gone.stderr


@pytest.mark.docker
@pytest.mark.slow
def test_a_node_that_hangs_after_its_trainer_returned_is_stopped_and_said(hang_image, tmp_path):
    """Every rank's trainer returned (end lines completed), the processes hang at exit: `up`
    waited for ever. Now it waits GRACE, dumps where they hang, stops them, fails the run."""
    out = harness(
        "up",
        "--image",
        hang_image,
        "--entry",
        "exit_hang_entry",
        "--grace",
        "15",
        "--run-id",
        "exit-hang",
        runs=tmp_path,
        timeout=300,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    summary = json.loads((tmp_path / "exit-hang/summary.json").read_text())
    reason = summary["reason"]
    assert summary["status"] == "failed" and reason.startswith(
        "trainer still running 15 s after every rank's trainer returned (end lines: completed): "
        "a process hung on its way out (rank 0: in linger at "
    ), reason
    assert "exit_hang_entry.py" in reason and leftovers("exit-hang") == []
