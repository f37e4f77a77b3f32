"""benchmarks/gpu_check.sh: the dry run passes without a GPU and prints every command; the real
run refuses clearly where no GPU is visible; make gpu-check DRY_RUN=1 is the dry run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
NO_GPU = shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists()


def run(*args, timeout=300):
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OUT": ""},
    )


def test_dry_run_passes_and_prints_every_command(tmp_path):
    docs = (ROOT / "docs/benchmarks.md").read_text()
    proc = run("--dry-run", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out"))
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    commands = [line for line in out.splitlines() if line.startswith("+ ")]
    # build, data, probe, train, the Compose layouts, report, the driver check (run first)
    assert len(commands) == 7, commands
    build, data, probe, train, compose, report, driver = commands
    assert driver.endswith("-m tuning.harness gpus --check-driver"), driver
    assert "-m tuning.container.tiny_model --size 1b" in build
    assert "-m tuning.container.demo_data" in data and "--words 1024" in data and "--n 240" in data
    assert "HARNESS_ENTRY=tuning.container.probe" in probe and "NCCL_DEBUG=INFO" in probe
    assert "-m tuning.launch" in probe and "-m tuning.launch" in train
    for want in (
        "HARNESS_DEVICE=gpu",
        "PET_NPROC_PER_NODE=1",
        "configs/accelerate/fsdp.yaml",
        "--torch_dtype bfloat16",
        "--max_seq_length 2048",
        "--max_steps 30",
        "--save_strategy no",
    ):
        assert want in train, want
    # the peak comes from the GPU's name unless --peak-tflops is given
    assert "benchmarks/mfu.py" in report and "--gpu " in report and "--peak-tflops" not in report
    assert "--layouts " in report and "compose/latest/report.json" in report
    # the Compose layouts: the bench on 2 GPUs, one round, 5 steps; skipped here, saying why
    assert compose.startswith("+ make bench GPUS=2 REPEAT=1 STEPS=5 RUNS=")
    assert "single, per-rank isolated, per-rank shared" in out
    seen = next(x for x in out.splitlines() if x.startswith("gpu-check: compose layouts here:"))
    if shutil.which("docker") is None:
        assert seen == "gpu-check: compose layouts here: skipped: no docker client on PATH"
    elif NO_GPU:
        assert seen.startswith("gpu-check: compose layouts here: skipped: ")
    assert "peak from the table for 'NVIDIA H100 80GB HBM3'" in out
    # what the launcher makes of it: one GPU rank, accelerate launch on the FSDP fixture
    rendered = next(x for x in out.splitlines() if "launcher (train) renders:" in x)
    assert "accelerate launch --config_file" in rendered and "--num_processes 1" in rendered
    assert "--multi_gpu" not in rendered and "-m tuning.sft_trainer" in rendered
    assert "parameters" in out and "1,100,048,384 parameters" in out
    assert "FAILED" not in out and "gpu-check: dry run ok" in out
    assert (ROOT / "docs/benchmarks.md").read_text() == docs  # a dry run writes no docs
    assert not (tmp_path / "out").exists()


def test_peak_and_steps_reach_the_commands(tmp_path):
    proc = run("--dry-run", "--work", str(tmp_path), "--steps", "12", "--peak-tflops", "500")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--max_steps 12" in proc.stdout and "--peak-tflops 500" in proc.stdout
    env_peak = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "--work", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OUT": "", "PEAK_TFLOPS": "312"},
    )
    assert env_peak.returncode == 0 and "--peak-tflops 312" in env_peak.stdout


@pytest.mark.skipif(not NO_GPU, reason="a GPU is visible here")
def test_without_a_gpu_the_real_run_fails_clearly(tmp_path):
    proc = run("--work", str(tmp_path / "work"), "--out", str(tmp_path / "out"), timeout=60)
    assert proc.returncode == 3
    assert "no GPU visible: " in proc.stderr
    assert not (tmp_path / "work").exists()  # it stopped before doing anything


def test_bad_arguments_are_refused():
    assert run("--steps", "3").returncode == 2
    proc = run("--bogus")
    assert proc.returncode == 2 and "unknown argument: --bogus" in proc.stderr


def test_make_gpu_check_dry_run_is_the_scripts_dry_run():
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make")
    proc = subprocess.run(
        [make, "-n", "gpu-check", "DRY_RUN=1", "STEPS=12"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "benchmarks/gpu_check.sh --dry-run --steps 12" in proc.stdout
    off = subprocess.run(
        [make, "-n", "gpu-check", "DRY_RUN=0"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert "gpu_check.sh" in off.stdout and "--dry-run" not in off.stdout
