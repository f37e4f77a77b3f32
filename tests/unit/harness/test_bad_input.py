"""Every mistake ends with one clear message, a non-zero exit, nothing started and no run
recorded as succeeded (those only an engine can answer: test_bad_input_docker.py)."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from support.harness import no_run_recorded, up
from support.paths import ROOT
from tuning.harness.backends import engine
from tuning.harness.errors import HarnessError


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    model = tmp_path / "model-no-tokenizer"
    model.mkdir()
    (model / "config.json").write_text("{}")
    not_model = tmp_path / "not-a-model"
    not_model.mkdir()
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"input": "a", "output": "b"}\n{"input": "a" "output": "b"}\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    no_field = tmp_path / "no-field.jsonl"
    no_field.write_text('{"input": "a", "output": "b"}\n{"input": "c"}\n')
    return {
        "model": model,
        "not_model": not_model,
        "bad_json": bad_json,
        "empty": empty,
        "no_field": no_field,
    }


CASES = {
    "gpus not a number": (["--gpus", "two"], "GPUS='two' is not a whole number"),
    "gpus negative": (["--gpus", "-1"], "GPUS=-1 must be at least 0"),
    "gpus more than the host has": (["--gpus", "64"], "GPUS=64 but this host shows"),
    "nproc below one": (["--gpus", "0", "--nproc", "0"], "NPROC=0 must be at least 1"),
    "layout unknown": (["--layout", "ring", "--gpus", "0"], "LAYOUT='ring' is unknown"),
    "steps zero": (["--gpus", "0", "--steps", "0"], "STEPS=0 must be at least 1"),
    "job missing": (["--gpus", "0", "--job", "/nope.yaml"], "JOB=/nope.yaml: no such file"),
    "steps not a number": (["--gpus", "0", "--steps", "ten"], "STEPS='ten' is not a whole"),
    "model missing": (["--gpus", "0", "--model", "/nonexistent/model"], "no such directory"),
    "model not a model dir": (["--gpus", "0", "--model", "{not_model}"], "has no config.json"),
    "model without tokenizer": (["--gpus", "0", "--model", "{model}"], "has no tokenizer"),
    "data missing": (["--gpus", "0", "--data", "/nonexistent.jsonl"], "no such file"),
    "data empty": (["--gpus", "0", "--data", "{empty}"], "empty data file"),
    "data not json lines": (["--gpus", "0", "--data", "{bad_json}"], "bad.jsonl:2: malformed"),
    "data lacks a field": (["--gpus", "0", "--data", "{no_field}"], "no-field.jsonl:2:"),
    "config unknown file": (["--gpus", "0", "--config", "nope.yaml"], "CONFIG=nope.yaml: no such"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_refused_before_anything_starts(case, tmp_path, files):
    args, message = CASES[case]
    args = [a.format(**files) for a in args]
    out = up(tmp_path, *args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.count("harness: error:") == 1
    assert no_run_recorded(tmp_path / "runs")
    assert not list((tmp_path / "runs").glob("2*")), "a run directory was created"


def test_runs_directory_not_writable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuning.harness",
            "up",
            "--gpus",
            "0",
            "--runs",
            str(blocker / "runs"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "is not writable" in out.stderr, out.stderr


def test_no_engine_says_what_is_missing_and_points_to_host(tmp_path):
    out = up(tmp_path, "--gpus", "0", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert out.returncode == 2, out.stderr
    assert "no Docker engine answers at unix:///nonexistent/docker.sock" in out.stderr
    assert "LAYOUT=host" in out.stderr and "Traceback" not in out.stderr


def test_compose_v1_only_is_named(tmp_path, monkeypatch):
    # Real executables that answer as the CLIs do: `docker` without the compose plugin, and
    # a v1 docker-compose; the harness's own environment has no docker-compose either.
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    no_plugin = "echo \"docker: 'compose' is not a docker command.\" >&2; exit 1"
    for name, text in (("docker", no_plugin), ("docker-compose", "echo 1.29.2")):
        exe = bin_ / name
        exe.write_text(f"#!/bin/sh\n{text}\n")
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(bin_))
    monkeypatch.setattr(sys, "executable", str(bin_ / "python"))
    with pytest.raises(HarnessError, match=r"only Compose v1 \(.*docker-compose 1.29.2\)"):
        engine.compose_cmd()
