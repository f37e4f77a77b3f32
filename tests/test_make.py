"""The Makefile's switches: RESUME, DRY_RUN, REHEARSE and REBUILD are off when empty, 0,
false, no or off (RESUME=0 used to resume), on for 1, true, yes. Read from `make -n`."""

from __future__ import annotations

import subprocess

import pytest
from conftest import ROOT

SWITCHES = [("up", "RESUME", "--resume"), ("up", "DRY_RUN", "--dry-run"),
            ("bench", "DRY_RUN", "--dry-run"), ("kube", "REHEARSE", "--rehearse"),
            ("image", "REBUILD", "--rebuild"), ("image", "DRY_RUN", "--dry-run")]  # fmt: skip


def harness_line(target: str, assignment: str) -> str:
    out = subprocess.run(["make", "-n", "--no-print-directory", target, assignment], cwd=ROOT,
                         capture_output=True, text=True, check=True)  # fmt: skip
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
