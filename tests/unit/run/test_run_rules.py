"""The rules a run is held to before and after it runs (issue 12): the status comes from what
the ranks did, one rule for run ids, RESUME checks what it resumes from and never changes the
earlier run's files, a dry run checks CONFIG as a real run does, one GPU for one run."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker.errors
import pytest

from support.checkpoints import tree
from support.harness import harness
from support.paths import ROOT
from tuning.harness.backends import nodes
from tuning.harness.errors import HarnessError
from tuning.harness.machine import gpu_locks
from tuning.harness.run import lifecycle, output_dir
from tuning.harness.run_files import folders
from tuning.harness.run_files.status import status_of
from tuning.harness.spec import ranks_user
from tuning.harness.spec.layout import Layout


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


def fake_run(root: Path, run_id: str, ckpts: dict[str, list[str]], status="failed") -> Path:
    """A previous run with checkpoints holding the named files."""
    d = root / run_id
    (d / "output").mkdir(parents=True)
    tree(d / "output", ckpts)  # each file whole in its format (test_torn)
    (d / "summary.json").write_text(json.dumps({"status": status}))
    folders.point_latest(root, run_id)
    return d


COMPLETE = ["trainer_state.json", "model.safetensors", "rng_state_0.pth", "rng_state_1.pth"]


def test_resume_names_what_it_resumes_from_in_a_dry_run(tmp_path):
    fake_run(tmp_path, "before", {"checkpoint-10": COMPLETE, "checkpoint-20": COMPLETE})
    out = harness("up", "--dry-run", "--resume", runs=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "resuming from run before (failed): checkpoint-20, saved by 2 rank(s)" in out.stdout


@pytest.mark.parametrize(
    "ckpts, flags, message",
    [
        (
            {"checkpoint-10": ["trainer_state.json", "training_args.bin"]},
            [],
            "run before has no complete checkpoint in its output (checkpoint-10: no weights",
        ),
        ({"checkpoint-10": COMPLETE}, ["--nproc", "4"], "saved by 2 rank(s); this run has 4"),
        ({}, [], "run before has no complete checkpoint in its output; start afresh"),
    ],
)
def test_resume_refuses_what_it_cannot_resume(tmp_path, ckpts, flags, message):
    fake_run(tmp_path, "before", ckpts)
    for dry in (["--dry-run"], []):
        out = harness(
            "up", "--resume", *flags, *dry, "--run-id", "after", runs=tmp_path, timeout=120
        )
        assert out.returncode == 2 and message in out.stderr, out.stdout + out.stderr
        assert not (tmp_path / "after").exists()  # refused before anything was written


def test_resume_past_a_torn_checkpoint_names_it(tmp_path):
    """A save cut short (issue 23): RESUME takes the newest complete checkpoint and says the
    torn one after it is moved aside in the new run (the earlier run's stays as it was)."""
    fake_run(
        tmp_path,
        "before",
        {"checkpoint-10": COMPLETE, "checkpoint-9x": [], "checkpoint-20": ["model.safetensors"]},
    )
    out = harness("up", "--dry-run", "--resume", runs=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert (
        "checkpoint-20 of run before is incomplete (no trainer_state.json): it is moved "
        "aside in this run, never loaded"
    ) in out.stdout
    assert "resuming from run before (failed): checkpoint-10, saved by 2 rank(s)" in out.stdout
    assert (tmp_path / "before/output/checkpoint-20").is_dir()


def test_resume_from_names_a_run(tmp_path):
    fake_run(tmp_path, "first", {"checkpoint-5": COMPLETE})
    fake_run(tmp_path, "second", {})  # latest: has nothing
    out = harness("up", "--dry-run", "--resume-from", "first", runs=tmp_path, timeout=120)
    assert out.returncode == 0 and "resuming from run first" in out.stdout, out.stderr
    out = harness("up", "--dry-run", "--resume-from", "nope", runs=tmp_path, timeout=120)
    assert out.returncode == 2 and "RESUME_FROM=nope: no such run" in out.stderr, out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to the ranks' user needs root")
def test_resume_never_changes_the_earlier_runs_files(tmp_path):
    prev = fake_run(tmp_path, "before", {"checkpoint-10": COMPLETE})
    for f in (prev / "output/checkpoint-10").iterdir():
        f.chmod(0o600)  # as the Trainer leaves model.safetensors
    before = {
        f.name: (f.stat().st_uid, f.stat().st_mode)
        for f in (prev / "output/checkpoint-10").iterdir()
    }
    out = tmp_path / "after/output"
    out.mkdir(parents=True)
    output_dir.take_checkpoints(prev, out, Layout(kind="single", user="1000:1000"))
    after = {
        f.name: (f.stat().st_uid, f.stat().st_mode)
        for f in (prev / "output/checkpoint-10").iterdir()
    }
    assert after == before
    taken = list((out / "checkpoint-10").iterdir())
    assert sorted(f.name for f in taken) == sorted(COMPLETE)
    assert all(f.stat().st_uid == 1000 for f in [out / "checkpoint-10", *taken])
    original = prev / "output/checkpoint-10"
    assert all(f.read_bytes() == (original / f.name).read_bytes() for f in taken)


@contextlib.contextmanager
def as_a_normal_user(tree: Path):
    """Root becomes uid 65534 for the block (seteuid, then back); others are one already."""
    if os.geteuid() != 0:
        yield
        return
    for f in [tree, *tree.rglob("*")]:
        os.chown(f, 65534, 65534, follow_symlinks=False)
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)


def test_resume_as_a_normal_user_links_and_changes_nothing():
    """The path every non-root user takes: the ranks run as the user (ranks_user.for_ranks),
    the earlier run's files are the user's and are hard-linked, never chowned or chmodded.
    Under root it runs as uid 65534, so it runs everywhere."""
    tree = Path(tempfile.mkdtemp(prefix="resume-user-"))  # not under root's 0700 pytest dir
    try:
        tree.chmod(0o755)
        prev = fake_run(tree, "before", {"checkpoint-10": COMPLETE})
        out = tree / "after/output"
        out.mkdir(parents=True)
        files = sorted((prev / "output/checkpoint-10").iterdir())
        for f in files:
            f.chmod(0o600)  # as the Trainer leaves model.safetensors
        with as_a_normal_user(tree):
            before = {f.name: (f.stat().st_uid, f.stat().st_mode) for f in files}
            layout = Layout(kind="single", **ranks_user.for_ranks("single"))
            output_dir.take_checkpoints(prev, out, layout)
        assert {f.name: (f.stat().st_uid, f.stat().st_mode) for f in files} == before
        taken = {f.name: f.stat().st_ino for f in (out / "checkpoint-10").iterdir()}
        assert taken == {f.name: f.stat().st_ino for f in files}  # the same inodes: links
    finally:
        shutil.rmtree(tree)


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
    layout = Layout(kind="host", run_dir=str(tmp_path))
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
    from tuning.harness.spec.flags import RunFlags

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
