"""RESUME, one of the rules a run is held to before it runs (issue 12): it checks what it
resumes from, in a dry run too, names a torn checkpoint it resumes past, takes RESUME_FROM as a
run, and never changes the earlier run's files, also as a normal user (the other rules:
test_run_rules.py)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from support.checkpoints import tree
from support.harness import harness
from tuning.harness.contract import ranks_user
from tuning.harness.layout.layout import Layout
from tuning.harness.layout.trainer import Trainer
from tuning.harness.run import output_dir
from tuning.harness.run_files import folders


def fake_run(root: Path, run_id: str, ckpts: dict[str, list[str]], status="failed") -> Path:
    """A previous run with checkpoints holding the named files."""
    d = root / run_id
    (d / "output").mkdir(parents=True)
    tree(d / "output", ckpts)  # each file whole in its format
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
    output_dir.take_checkpoints(prev, out, Layout(trainer=Trainer(user="1000:1000")))
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
            layout = Layout(trainer=Trainer(**ranks_user.for_ranks("single")))
            output_dir.take_checkpoints(prev, out, layout)
        assert {f.name: (f.stat().st_uid, f.stat().st_mode) for f in files} == before
        taken = {f.name: f.stat().st_ino for f in (out / "checkpoint-10").iterdir()}
        assert taken == {f.name: f.stat().st_ino for f in files}  # the same inodes: links
    finally:
        shutil.rmtree(tree)
