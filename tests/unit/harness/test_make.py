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
