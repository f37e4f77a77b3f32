"""LAYOUT=host runs, the real ranks on this machine: a preempted run is recorded `preempted`
(the ranks exit 0 on SIGTERM), and ranks never outlive a harness killed with -9; the next run
finds the dead one and records it `interrupted`. No containers: these run everywhere."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from support.harness import harness, wait_training
from support.paths import PYTHON, ROOT

# Slow steps, so the run is mid-training when the signal lands (HostNodes passes the
# harness's environment to the ranks).
ENV = {**os.environ, "HARNESS_STEP_SLEEP": "0.3", "OMP_NUM_THREADS": "1"}


def start(runs: Path, run_id: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            PYTHON,
            "-m",
            "tuning.harness",
            "up",
            "--layout",
            "host",
            "--steps",
            "400",
            "--run-id",
            run_id,
            "--runs",
            str(runs),
        ],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def ranks_of(run_dir: Path) -> list[int]:
    """Processes whose command line names the run (the launcher and its ranks)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(run_dir / "job").encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            pass  # gone meanwhile
    return found


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_preempted_run_is_recorded_preempted(tmp_path):
    proc = start(tmp_path, "pre")
    try:
        wait_training(tmp_path, "pre", proc, 240)
        # The launcher, the harness's child: SIGTERM to it, as kubelet stops a pod's PID 1
        # (torchrun passes it on to the ranks).
        launcher = [p for p in ranks_of(tmp_path / "pre") if parent(p) == proc.pid]
        assert len(launcher) == 1, launcher
        os.kill(launcher[0], signal.SIGTERM)
        out, _ = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert (tmp_path / "pre/summary.json").is_file(), f"exit {proc.returncode}:\n{out}"
    summary = json.loads((tmp_path / "pre/summary.json").read_text())
    assert summary["status"] == "preempted", out
    assert "SIGTERM" in summary["reason"] and proc.returncode == 143, out
    assert 0 < summary["steps"] < 400
    assert any((tmp_path / "pre/output").glob("checkpoint-*")), "preempted without a checkpoint"


def test_host_ranks_die_with_their_harness_and_the_next_run_records_it(tmp_path):
    proc = start(tmp_path, "dead")
    try:
        wait_training(tmp_path, "dead", proc)
        assert ranks_of(tmp_path / "dead")
        proc.send_signal(signal.SIGKILL)  # the harness, not its ranks
        proc.wait(30)
        deadline = time.monotonic() + 90
        while ranks_of(tmp_path / "dead") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert ranks_of(tmp_path / "dead") == [], "host ranks outlived their harness"
    finally:
        proc.kill()
        for pid in ranks_of(tmp_path / "dead"):
            os.kill(pid, signal.SIGKILL)
    assert not (tmp_path / "dead/summary.json").exists()
    out = harness(
        "up", "--layout", "host", "--steps", "2", "--run-id", "next", runs=tmp_path, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "run dead's harness is gone" in out.stdout, out.stdout
    dead = json.loads((tmp_path / "dead/summary.json").read_text())
    assert dead["status"] == "interrupted" and "died while the ranks ran" in dead["reason"]
    assert dead["steps"] > 0
    assert (tmp_path / "latest").resolve().name == "next"
