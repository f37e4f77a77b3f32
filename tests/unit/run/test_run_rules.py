"""The rules a run is held to before and after it runs (issue 12): the status comes from what
the ranks did, one rule for run ids, a dry run checks CONFIG as a real run does, one GPU for one
run, a teardown error ends the run failed, fault knobs are checked first (RESUME's rules:
test_resume.py)."""

from __future__ import annotations

import subprocess
import sys
import time

import docker.errors
import pytest

from support.harness import harness
from support.paths import ROOT
from tuning.harness.backends import nodes
from tuning.harness.errors import HarnessError
from tuning.harness.layout.layout import Layout
from tuning.harness.layout.mounts import Mounts
from tuning.harness.layout.topology import Topology
from tuning.harness.machine import gpu_locks
from tuning.harness.run import lifecycle
from tuning.harness.run_files import folders
from tuning.harness.run_files.status import status_of


def end(status: str) -> list[dict]:
    return [
        {"event": "step", "step": 1, "loss": 1.0, "time": 0.0},
        {"event": "end", "status": status},
    ]


@pytest.mark.parametrize(
    "exits, metrics, status",
    [
        ({"trainer": 0}, {0: end("completed"), 1: end("completed")}, "succeeded"),
        ({"trainer": 0}, {0: end("preempted"), 1: end("preempted")}, "preempted"),
        ({"rank0": 0, "rank1": 143}, {0: end("preempted"), 1: end("preempted")}, "preempted"),
        ({}, {}, "failed"),  # nothing ran is not a success
        ({"trainer": 0}, {0: end("completed"), 1: end("failed")}, "failed"),
        ({"trainer": 0}, {0: end("completed"), 1: end("completed")[:1]}, "failed"),  # no end line
        ({"trainer": 1}, {0: end("completed")}, "failed"),
        ({"trainer": 0}, {}, "succeeded"),  # a probe logs no metrics: its exit code is all
    ],
)
def test_status_comes_from_what_the_ranks_did(exits, metrics, status):
    got, reason = status_of(exits, metrics)
    assert got == status
    assert (reason is None) == (status == "succeeded")


def test_a_rank_that_dies_after_its_trainer_returned_is_named_so():
    """Every end line completed, the node exited 1 (a gloo rank's SIGABRT at exit, seen with
    fms): failed, and the reason says where to look; a rank with no end line is not that case."""
    done = {0: end("completed"), 1: end("completed")}
    got, reason = status_of({"trainer": 1}, done)
    assert got == "failed" and reason.startswith("trainer exited 1 after every rank's trainer")
    _, reason = status_of({"trainer": 1}, {0: end("completed"), 1: end("completed")[:1]})
    assert reason == "trainer exited 1"


@pytest.mark.parametrize("bad", ["../escape", "MyRun", "a_b", "-x", "x" * 33, "a/b"])
def test_a_bad_run_id_is_refused_before_anything_is_written(tmp_path, bad):
    runs_dir = tmp_path / "runs"
    for cmd in (["up", "--dry-run"], ["up"], ["kube"], ["logs"], ["bench", "--dry-run"]):
        out = harness(*cmd, f"--run-id={bad}", runs=runs_dir, timeout=120)
        assert out.returncode == 2, (cmd, out.stdout, out.stderr)
        assert f"RUN_ID={bad!r}" in out.stderr and "e.g. RUN_ID=" in out.stderr, out.stderr
    assert not (tmp_path / "escape").exists()
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_a_good_run_id_passes():
    assert folders.check_run_id("sft-demo-2") == "sft-demo-2"
    assert folders.check_run_id(folders.new_run_id())


def test_a_dry_run_checks_config_as_a_real_run_does(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("distributed_type: FSDP\nnot_an_accelerate_key: 1\n")
    out = harness("up", "--dry-run", "--config", str(bad), runs=tmp_path / "runs", timeout=300)
    assert out.returncode == 2 and "accelerate refuses it" in out.stderr, out.stdout + out.stderr
    assert "not_an_accelerate_key" in out.stderr
    eight = tmp_path / "eight.yaml"
    eight.write_text(
        (ROOT / "configs/accelerate/fsdp-cpu.yaml")
        .read_text()
        .replace("num_processes: 1", "num_processes: 8")
    )
    out = harness("up", "--dry-run", "--config", str(eight), "--nproc", "2", runs=tmp_path / "runs")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "says num_processes: 8, but this run has 2 rank(s)" in out.stderr
    out = harness("up", "--dry-run", "--config", str(eight), "--nproc", "8", runs=tmp_path / "runs")
    assert out.returncode == 0, out.stderr


HOLD = """
import sys, time
from pathlib import Path
from tuning.harness.machine import gpu_locks
held = gpu_locks.take(["0", "1"], "other-run", Path(sys.argv[1]))
print("held", flush=True)
time.sleep(600)
"""


def test_a_busy_gpu_is_refused_and_freed_when_its_holder_dies(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(HarnessError, match=r"GPU 1 is in use by run other-run \(harness pid"):
            gpu_locks.take(["2", "1"], "mine", tmp_path)
        gpu_locks.take(["2"], "mine", tmp_path).release()  # all or none: 2 was let go
    finally:
        holder.kill()  # SIGKILL: the kernel drops its locks
        holder.wait()
    deadline = time.monotonic() + 10
    while True:
        try:
            gpu_locks.take(["0", "1"], "mine", tmp_path).release()
            break
        except HarnessError:
            assert time.monotonic() < deadline
            time.sleep(0.1)


class TeardownFails(nodes.HostNodes):
    """Host nodes whose teardown meets the engine error a `compose down` can raise."""

    def stop(self) -> None:
        super().stop()
        raise docker.errors.APIError("500 Server Error: the engine is going away")


def test_a_teardown_error_ends_the_run_failed_with_the_reason(tmp_path):
    layout = Layout(topology=Topology("host"), mounts=Mounts(str(tmp_path)))
    (tmp_path / "logs").mkdir()
    commands = {"host": {"argv": [sys.executable, "-c", "pass"], "env": {}}}
    backend = TeardownFails(layout, tmp_path, commands)
    status, _, reason = lifecycle.execute(layout, tmp_path, backend, None, 5.0, time.time())
    assert status == "failed" and "teardown failed: 500 Server Error" in reason


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--rank", "x", "RANK='x' is not a whole number; e.g. RANK=0"),
        ("--rank", "-1", "RANK=-1 must be at least 0"),
        ("--at-step", "0", "AT_STEP=0 must be at least 1"),
        ("--at-step", "x", "AT_STEP='x' is not a whole number"),
        ("--rdzv-timeout", "0", "RDZV_TIMEOUT=0 must be at least 1"),
        ("--late", "0", "LATE=0 must be at least 1"),
    ],
)
def test_fault_knobs_are_checked_before_anything_starts(flag, value, message):
    """fault's own flags, typed like the run's (the knobs are read before any run starts)."""
    from tuning.harness import cli
    from tuning.harness.commands import fault
    from tuning.harness.flags.run_flags import RunFlags

    a = cli.parser().parse_args(["fault", "--fault", "kill", "--gpus", "0", flag, value])
    with pytest.raises(HarnessError, match=message):
        fault._knobs(a, RunFlags.of(a))
    ok = cli.parser().parse_args(["fault", "--fault", "kill", "--gpus", "0", "--rank", "0"])
    assert fault._knobs(ok, RunFlags.of(ok)) == {
        "timeout_s": 20,
        "rdzv_timeout_s": 20,
        "rank": 0,
        "at_step": 12,
        "steps": 60,
        "late_s": 10,
    }
