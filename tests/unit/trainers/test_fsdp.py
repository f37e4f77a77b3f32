"""FSDP on CPU ranks really shards, trains as DDP does, and never falls back to DDP silently.

Runs through the image's own launcher (python -m tuning.launch) on the host: 2 gloo ranks.
Measured here (12 steps, the demo job): each rank holds exactly 1/2 of the tiny model's
119,104 parameters, and the per-step loss equals DDP's to 1.8e-7 relative; the bound below
(1e-5) leaves room for reduction order on other machines, far below a step's change (~5%).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.launch import CONFIGS, FSDP_STEPS, FSDP_TOLERANCE, free_port, launcher
from support.metrics import read_metrics, step_losses
from support.paths import ROOT

pytestmark = pytest.mark.slow


def sharding(out: Path, rank: int) -> dict:
    return next(x for x in read_metrics(out, rank) if x["event"] == "sharding")


@pytest.fixture(scope="module")
def fsdp_and_ddp(tiny_model, demo_data, tmp_path_factory):
    runs = {}
    for name, config in (("fsdp", CONFIGS / "fsdp-cpu.yaml"), ("ddp", CONFIGS / "cpu.yaml")):
        out = tmp_path_factory.mktemp(name)
        proc = launcher(tiny_model, demo_data, out, config)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        runs[name] = out
    return runs


def test_fsdp_shards_the_parameters_across_ranks(fsdp_and_ddp):
    shards = [sharding(fsdp_and_ddp["fsdp"], r) for r in (0, 1)]
    total = shards[0]["params_total"]
    for s in shards:
        assert s["distributed_type"] == "FSDP" and s["world_size"] == 2
        assert abs(s["params_local"] - total / 2) <= 0.01 * total, s
    assert sum(s["params_local"] for s in shards) == total  # every parameter is somewhere once
    for r in (0, 1):  # DDP, for contrast: every rank holds the whole model
        d = sharding(fsdp_and_ddp["ddp"], r)
        assert d["distributed_type"] == "MULTI_CPU" and d["params_local"] == total


def test_fsdp_loss_curve_equals_ddp(fsdp_and_ddp):
    for rank in (0, 1):
        fsdp, ddp = step_losses(fsdp_and_ddp["fsdp"], rank), step_losses(fsdp_and_ddp["ddp"], rank)
        assert sorted(fsdp) == sorted(ddp) == list(range(1, FSDP_STEPS + 1))
        worst = max(abs(fsdp[s] - ddp[s]) / abs(ddp[s]) for s in ddp)
        assert worst < FSDP_TOLERANCE, f"rank {rank}: FSDP and DDP losses differ by {worst:.2e}"
        assert ddp[FSDP_STEPS] < ddp[1] - 1.0  # and both really trained


def test_fsdp_config_forced_onto_ddp_fails_clearly(tiny_model, demo_data, tmp_path):
    # What the launcher used to do on CPU: --multi_gpu beside an FSDP config silently gave
    # DDP. Reproduced by hand: accelerate launch --multi_gpu with the FSDP fixture.
    env = {
        **os.environ,
        "ACCELERATE_USE_CPU": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        "HARNESS_DISTRIBUTED_TYPE": "FSDP",
    }
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    cmd = [
        accelerate,
        "launch",
        "--config_file",
        str(CONFIGS / "fsdp-cpu.yaml"),
        "--multi_gpu",
        "--num_processes",
        "2",
        "--main_process_port",
        str(free_port()),
        "-m",
        "tuning.sft_trainer",
        "--config",
        str(ROOT / "configs/jobs/demo.yaml"),
        "--model_name_or_path",
        str(tiny_model),
        "--training_data_path",
        str(demo_data),
        "--output_dir",
        str(tmp_path / "out"),
        "--max_steps",
        "2",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert "asks for FSDP but accelerate set up MULTI_CPU" in proc.stderr
    assert not any(x["event"] == "step" for x in read_metrics(tmp_path / "out", 0))
