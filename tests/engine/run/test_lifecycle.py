"""Runs that end badly in containers end recorded (issue 12): containers removed from outside
end the run `failed` with the reason; a harness killed with -9 leaves containers that the
next `up` (or `make down`) finds, removes and records `interrupted`; `down RUN_ID=x` removes
that run only. The containers run with a read-only root and the limits asked for."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import docker
import pytest

from support.engine import leftovers
from support.harness import harness, wait_training
from support.paths import PYTHON, ROOT

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def start(runs: Path, run_id: str, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(
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
            run_id,
            "--runs",
            str(runs),
            *flags,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def containers(run_id: str, runs: Path) -> list:
    """Run `run_id`'s containers of the RUNS folder `runs` (another checkout may use the id)."""
    labels = [f"harness.run={run_id}", f"harness.runs={runs.resolve()}"]
    return docker.from_env().containers.list(all=True, filters={"label": labels})


def test_containers_removed_from_outside_end_the_run_failed(harness_image, tmp_path):
    proc = start(tmp_path, "gone", "--layout", "per-rank", "--memory", "2g", "--pids", "1024")
    try:
        wait_training(tmp_path, "gone", proc)
        ctrs = {c.labels["harness.node"]: c for c in containers("gone", tmp_path)}
        host = ctrs["rank1"].attrs["HostConfig"]
        assert host["Memory"] == 2 * 1024**3 and host["PidsLimit"] == 1024
        assert host["ReadonlyRootfs"] is True and "/tmp" in host["Tmpfs"]  # and it trains
        ctrs["rank1"].remove(force=True)  # `docker rm -f`, from outside the harness
        out, _ = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 1, out
    summary = json.loads((tmp_path / "gone/summary.json").read_text())
    assert summary["status"] == "failed", out
    assert "removed from outside the harness" in summary["reason"], summary["reason"]
    assert "Traceback" not in out, out
    assert summary["image"]["tag"] == harness_image
    assert summary["image"]["id"].startswith("sha256:")
    assert leftovers("gone", tmp_path) == []


def test_a_killed_harness_leaves_containers_the_next_run_and_down_clean_up(harness_image, tmp_path):
    procs = {rid: start(tmp_path, rid) for rid in ("deada", "deadb")}
    try:
        for rid, proc in procs.items():
            wait_training(tmp_path, rid, proc)
        for proc in procs.values():
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        time.sleep(2)
        # The defect this guards against: the ranks go on, holding their CPUs or GPUs.
        for rid in procs:
            left = {c.name: c.status for c in containers(rid, tmp_path)}
            assert left and set(left.values()) == {"running"}, f"run {rid}: {left}"

        out = harness("down", "--run-id", "deada", runs=tmp_path, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "removed run deada: container harness-deada-trainer-1" in out.stdout, out.stdout
        assert (
            containers("deada", tmp_path) == [] and containers("deadb", tmp_path) != []
        )  # that run only
        a = json.loads((tmp_path / "deada/summary.json").read_text())
        assert a["status"] == "interrupted" and a["steps"] > 0
        assert (tmp_path / "deada/logs/trainer.log").stat().st_size > 0  # logs saved first
        # make ps: the survivor's container, still running, and nothing of the removed run
        ps = harness("ps", runs=tmp_path, timeout=60)
        assert ps.returncode == 0 and "deadb  harness-deadb-trainer-1  running" in ps.stdout
        assert "deada" not in ps.stdout, ps.stdout
        # make logs of a run whose containers are gone: the logs the harness saved
        logs = harness("logs", "--run-id", "deada", runs=tmp_path, timeout=60)
        assert logs.returncode == 0, logs.stderr
        assert f"==> {tmp_path / 'deada/logs/trainer.log'} <==" in logs.stdout, logs.stdout
        assert "harness-launch: accelerate launch" in logs.stdout, logs.stdout

        out = harness(
            "up", "--gpus", "0", "--steps", "2", "--run-id", "next", runs=tmp_path, timeout=300
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert "run deadb's harness is gone" in out.stdout, out.stdout
        assert leftovers("deadb", tmp_path) == []
        b = json.loads((tmp_path / "deadb/summary.json").read_text())
        assert b["status"] == "interrupted" and "died while the ranks ran" in b["reason"]

        out = harness("down", runs=tmp_path, timeout=120)
        assert out.returncode == 0 and "nothing to remove" in out.stdout, out.stdout
    finally:
        for proc in procs.values():
            proc.kill()
        for rid in procs:
            for c in containers(rid, tmp_path):
                c.remove(force=True)
