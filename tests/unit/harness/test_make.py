"""The Makefile's switches: RESUME, DRY_RUN, REHEARSE and REBUILD are off when empty, 0,
false, no or off (RESUME=0 used to resume), on for 1, true, yes. Read from `make -n`."""

from __future__ import annotations

import os
import subprocess

import pytest

from support.paths import ROOT

SWITCHES = [
    ("up", "RESUME", "--resume"),
    ("up", "DRY_RUN", "--dry-run"),
    ("bench", "DRY_RUN", "--dry-run"),
    ("kube", "REHEARSE", "--rehearse"),
    ("image", "REBUILD", "--rebuild"),
    ("image", "DRY_RUN", "--dry-run"),
]


def harness_line(target: str, assignment: str, env: dict | None = None) -> str:
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", target, assignment],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    lines = out.stdout.replace("\\\n", " ").splitlines()  # a recipe may continue lines
    return next(x for x in lines if "-m tuning.harness" in x)


@pytest.mark.parametrize(("target", "var", "flag"), SWITCHES)
@pytest.mark.parametrize("value", ["", "0", "false", "no", "off", "FALSE"])
def test_a_switch_set_to_off_is_off(target, var, flag, value):
    assert flag not in harness_line(target, f"{var}={value}").split()


@pytest.mark.parametrize(("target", "var", "flag"), SWITCHES)
@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_a_switch_set_to_on_is_on(target, var, flag, value):
    assert flag in harness_line(target, f"{var}={value}").split()


@pytest.mark.parametrize("target", ["up", "bench", "fault", "kube", "image"])
def test_cuda_reaches_every_command_that_picks_a_gpu_image(target):
    assert "--cuda '12.8'" in harness_line(target, "CUDA=12.8")


@pytest.mark.parametrize("target", ["up", "down", "kube"])
def test_an_environment_variable_named_runs_is_not_a_flag(target):
    """RUNS, like every variable, counts only when typed on make's command line."""
    line = harness_line(target, "RUN_ID=x", env={"RUNS": "/elsewhere", "VENV": "/nowhere"})
    assert "--runs 'runs'" in line and "/elsewhere" not in line
    assert line.startswith(".venv/bin/python "), line
    assert "--runs '/mine'" in harness_line(target, "RUNS=/mine", env={"RUNS": "/elsewhere"})


def make_run(*words: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-s", "--no-print-directory", *words],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_a_variable_no_target_knows_is_refused_with_the_nearest_name(tmp_path):
    out = make_run("up", "DRY_RUN=1", "GPU=0", "NPROCS=3", "STPES=5", f"RUNS={tmp_path / 'r'}")
    assert out.returncode != 0 and out.stdout == "", out.stdout
    said = out.stderr.strip().splitlines()
    assert len(said) == 1, said
    for typed, near in (("GPU", "GPUS"), ("NPROCS", "NPROC"), ("STPES", "STEPS")):
        assert f"{typed} (did you mean {near}?)" in said[0], said
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("var", ["DRY_RUN", "GPUS", "MODEL"])
def test_a_known_variable_in_the_environment_is_refused(var, tmp_path):
    """`DRY_RUN=1 make up` would train for real on every GPU: make never reads it, so it stops."""
    out = make_run("up", f"RUNS={tmp_path / 'r'}", env={var: "1"})
    assert out.returncode != 0 and out.stdout == "", out.stdout
    assert f"{var} set in the environment" in out.stderr and "put it after make" in out.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "words",
    [
        ("up", "GPUS=0", "NPROC=2", "LAYOUT=per-rank"),
        ("bench", "GPUS=0", "NPROC=2"),
        ("fault", "FAULT=kill", "RANK=1", "AT_STEP=7"),
        ("fault", "FAULT=partition", "LAYOUT=single"),
        ("pool",),
    ],
    ids=lambda w: "-".join(w),
)
def test_a_dry_run_writes_nothing(words, tmp_path):
    """Neither RUNS nor the checkout changes (git's view, ignored files included)."""

    def seen() -> str:
        return subprocess.run(
            ["git", "status", "--porcelain", "--ignored", "--untracked-files=all", "build"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout

    before = seen()
    out = make_run(*words, "DRY_RUN=1", f"RUNS={tmp_path / 'runs'}")
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "runs").exists(), list((tmp_path / "runs").rglob("*"))
    assert seen() == before
    if words[0] == "fault":
        assert "the strike:" in out.stdout or "not applicable" in out.stdout, out.stdout
        assert "TIMEOUT=" in out.stdout or "not applicable" in out.stdout
