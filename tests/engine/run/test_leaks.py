"""Leaks, lost work and what a container may do, checked on running containers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from support.engine import leftovers
from support.harness import wait_training
from support.paths import ROOT

pytestmark = [pytest.mark.docker, pytest.mark.slow]
SECRET = "hf_not-a-real-token-4242"


def make_up(runs: Path, run_id: str, layout: str, steps: int = 5000) -> subprocess.Popen:
    """`make up` as a user starts it, in its own process group (what Ctrl-C signals)."""
    return subprocess.Popen(
        [
            "make",
            "--no-print-directory",
            "up",
            f"LAYOUT={layout}",
            "GPUS=0",
            f"STEPS={steps}",
            f"RUNS={runs}",
            f"RUN_ID={run_id}",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HF_TOKEN": SECRET},
        start_new_session=True,
    )


def inspect(run_id: str) -> list[dict]:
    ids = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=harness.run={run_id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return json.loads(subprocess.check_output(["docker", "inspect", *ids]))


@pytest.mark.parametrize("layout, containers", [("single", 1), ("per-rank", 2)])
def test_running_containers_are_locked_down_and_ctrl_c_cleans_up(
    tmp_path, harness_image, layout, containers
):
    run_id = f"sec-{layout}"
    proc = make_up(tmp_path, run_id, layout)
    try:
        wait_training(tmp_path, run_id, proc)
        found = inspect(run_id)
        assert len(found) == containers
        # the image's user under root; the user who typed `make up` otherwise (their files)
        uid, gid = (1000, 1000) if os.geteuid() == 0 else (os.geteuid(), os.getegid())
        for ctr in found:
            host = ctr["HostConfig"]
            assert ctr["Config"]["User"] == f"{uid}:{gid}"
            ids = subprocess.check_output(["docker", "exec", ctr["Id"], "id", "-u"], text=True)
            assert ids.strip() == str(uid)
            assert host["Privileged"] is False and host["CapDrop"] == ["ALL"]
            assert not host["CapAdd"]
            assert "no-new-privileges:true" in host["SecurityOpt"]
            assert not any("docker.sock" in m["Source"] for m in ctr["Mounts"])
            for net in ctr["NetworkSettings"]["Networks"]:
                info = json.loads(subprocess.check_output(["docker", "network", "inspect", net]))
                assert info[0]["Internal"] is True, f"{net} has a route out"
            # The secret reached the ranks, by name, and nowhere else.
            assert f"HF_TOKEN={SECRET}" in ctr["Config"]["Env"]
        ps = subprocess.check_output(["ps", "-eo", "args"], text=True)
        assert SECRET not in ps
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        proc.wait(120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = proc.stdout.read()
    assert proc.returncode != 0, out
    run = tmp_path / run_id
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted", out
    assert leftovers(run_id) == []
    assert (run / "output/metrics/rank0.jsonl").stat().st_size > 0  # work kept
    assert any((run / "logs").glob("*.log"))
    for path in run.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), f"secret written to {path}"


def test_a_killed_harness_leaves_containers_that_make_down_removes(tmp_path, harness_image):
    run_id = "killed-harness"
    proc = make_up(tmp_path, run_id, "per-rank")
    try:
        wait_training(tmp_path, run_id, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # no chance to clean up
        proc.wait()
    assert leftovers(run_id, tmp_path), "expected the dead harness's containers to remain"
    for _ in range(2):  # safe to run twice; RUNS: this test's runs only, never the checkout's
        out = subprocess.run(
            ["make", "--no-print-directory", "down", f"RUNS={tmp_path}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
    assert leftovers(run_id, tmp_path) == []


def test_a_second_up_runs_beside_the_first(tmp_path, harness_image):
    first = make_up(tmp_path, "beside-1", "per-rank", steps=30)
    second = make_up(tmp_path, "beside-2", "per-rank", steps=30)
    for proc in (first, second):
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out
    for run_id in ("beside-1", "beside-2"):
        summary = json.loads((tmp_path / run_id / "summary.json").read_text())
        assert summary["status"] == "succeeded" and summary["steps"] == 30
        assert leftovers(run_id) == []
