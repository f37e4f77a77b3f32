"""Our trainer on CPU ranks, launched as the tests launch it: `accelerate launch` of two gloo
ranks, the image's own launcher (python -m tuning.launch) on the host, and the rank recorder
run as a rank runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT
from tuning.harness.layout.options import free_port

ACCELERATE = str(Path(sys.executable).with_name("accelerate"))
CONFIGS = ROOT / "configs" / "accelerate"
CPU_CONFIG = CONFIGS / "cpu.yaml"
STEPS = 30  # trainer_args' default run: 30 steps, a checkpoint every 10
SAVE = 10


def trainer_args(model: Path, data: Path, out: Path, *extra: str, steps: int = STEPS) -> list[str]:
    """tuning.sft_trainer's command line for a short CPU run of the tiny model."""
    return [
        "--model_name_or_path",
        str(model),
        "--training_data_path",
        str(data),
        "--output_dir",
        str(out),
        "--max_steps",
        str(steps),
        "--learning_rate",
        "3e-3",
        "--max_seq_length",
        "64",
        "--per_device_train_batch_size",
        "4",
        "--seed",
        "7",
        "--save_strategy",
        "steps",
        "--save_steps",
        str(SAVE),
        "--logging_steps",
        "10",
        "--ddp_timeout",
        "60",
        *extra,
    ]


def check(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-5000:])


def launch_cmd(trainer_args: list[str], nproc: int = 2) -> list[str]:
    """The two-rank CPU recipe: MULTI_GPU fixture + ACCELERATE_USE_CPU=1 (see cpu.yaml)."""
    return [
        ACCELERATE,
        "launch",
        "--config_file",
        str(CPU_CONFIG),
        "--num_processes",
        str(nproc),
        "--num_machines",
        "1",
        "--machine_rank",
        "0",
        "--main_process_ip",
        "127.0.0.1",
        "--main_process_port",
        str(free_port()),
        "--rdzv_backend",
        "static",
        "--same_network",
        "-m",
        "tuning.sft_trainer",
        *trainer_args,
    ]


def launch_env(**extra) -> dict:
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_launch(trainer_args: list[str], timeout: float = 300, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        launch_cmd(trainer_args),
        cwd=ROOT,
        env=launch_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --- The image's launcher on the host: FSDP against DDP ----------------------------------------
FSDP_STEPS = 12
FSDP_TOLERANCE = 1e-5  # FSDP's per-step loss against DDP's (measured: 1.8e-7 relative)


def launcher(tiny_model, demo_data, out: Path, config: Path, *extra_args, **env):
    """python -m tuning.launch (as in the image) on this machine: 2 gloo ranks of the demo job
    for FSDP_STEPS steps under the accelerate `config`."""
    args = [
        "--config",
        str(ROOT / "configs/jobs/demo.yaml"),
        "--model_name_or_path",
        str(tiny_model),
        "--training_data_path",
        str(demo_data),
        "--output_dir",
        str(out),
        "--max_steps",
        str(FSDP_STEPS),
        "--save_strategy",
        "no",
        *extra_args,
    ]
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": venv_bin + os.pathsep + os.environ["PATH"],
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "HARNESS_DEVICE": "cpu",
        "PET_NPROC_PER_NODE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "ACCELERATE_CONFIG": str(config),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "tuning.launch", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def recorder(env: dict, device: str) -> subprocess.CompletedProcess:
    """The mounted recorder run as `accelerate launch` runs it in a rank: -m harness_rank (the
    `mounted` fixture's env)."""
    return subprocess.run(
        [sys.executable, "-m", "harness_rank"],
        capture_output=True,
        text=True,
        env={**env, "HARNESS_DEVICE": device},
        timeout=120,
    )
