"""GPU ranks on a machine without one: detection in containers and pods (a stand-in /dev tree),
and no silent CPU (HARNESS_DEVICE=gpu on this CPU-only machine, real processes, real torch):
the trainer, the probe and a foreign trainer under the rank recorder fail before their first
step, naming what they found."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.launch import free_port, launch_env, recorder
from support.metrics import read_metrics
from support.paths import ROOT
from tuning.container import launch
from tuning.container.rank import gpu_guard
from tuning.harness.run_files.status import status_of

DRIVER_FILE = Path(gpu_guard.DRIVER_FILE)
NO_DRIVER = f"driver: no NVIDIA driver ({gpu_guard.DRIVER_FILE} missing)"
# What torch on this machine reports: a CPU build sees no CUDA and no device.
FOUND = (
    "CUDA available: False; CUDA devices: 0 for 1 rank(s) on this node (LOCAL_WORLD_SIZE)",
    "its CUDA: None (a CPU build of torch)",
)


def stand_in_dev(root: Path, *names: str) -> Path:
    """A /dev as a container sees it: the driver's control nodes and the GPUs it was given (empty
    files stand in for the character devices; only their names are read)."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "null", *names):
        (root / name).touch()
    return root


# --- detection ---------------------------------------------------------------------------------


def test_a_container_given_gpu_5_sees_only_nvidia5_and_is_a_gpu_node(tmp_path):
    dev = stand_in_dev(tmp_path / "dev", "nvidia5")
    assert launch.gpu_nodes(dev) == ["nvidia5"]
    assert launch.device({}, dev) == "gpu"
    none = stand_in_dev(tmp_path / "bare")  # control nodes only: no GPU
    assert launch.gpu_nodes(none) == [] and launch.device({}, none) == "cpu"
    assert launch.device({"HARNESS_DEVICE": "cpu"}, dev) == "cpu"  # set wins
    assert launch.device({"HARNESS_DEVICE": "gpu"}, none) == "gpu"


def test_the_nvidia_runtimes_variable_marks_a_gpu_node(tmp_path):
    none = stand_in_dev(tmp_path / "dev")
    uuid = "GPU-8e1c6b4a-0f2d-4c7e-9a51-3b2d1e0f9c77"
    assert launch.device({"NVIDIA_VISIBLE_DEVICES": uuid}, none) == "gpu"
    assert launch.device({"NVIDIA_VISIBLE_DEVICES": "all"}, none) == "gpu"
    for empty in ("", "none", "void", "VOID"):
        assert launch.device({"NVIDIA_VISIBLE_DEVICES": empty}, none) == "cpu", empty


def test_a_pytorchjob_worker_with_gpus_4_to_7_gets_four_gpu_ranks(tmp_path):
    dev = stand_in_dev(tmp_path / "dev", "nvidia4", "nvidia5", "nvidia6", "nvidia7")
    env = {
        "PET_NNODES": "2",
        "PET_NODE_RANK": "1",
        "PET_NPROC_PER_NODE": "auto",
        "PET_MASTER_ADDR": "job-master-0",
        "PET_MASTER_PORT": "23456",
    }
    argv, extra = launch.command(env, [], dev_root=dev)
    flags = dict(zip(argv, argv[1:], strict=False))
    assert flags["--num_processes"] == "8" and flags["--machine_rank"] == "1"
    assert flags["--config_file"].endswith("configs/accelerate/fsdp.yaml")
    assert "ACCELERATE_USE_CPU" not in extra and "--multi_gpu" not in argv
    # the runtime's list of GPUs counts as well; without GPUs "auto" is one CPU rank
    assert launch._nproc({"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"}, "gpu", dev) == 2
    argv, extra = launch.command(env, [], dev_root=stand_in_dev(tmp_path / "cpu"))
    assert dict(zip(argv, argv[1:], strict=False))["--num_processes"] == "2"
    assert extra["ACCELERATE_USE_CPU"] == "1"


def test_the_probe_on_gpus_logs_ncclS_transport_and_training_stays_quiet():
    gpu = {"HARNESS_DEVICE": "gpu", "HARNESS_ENTRY": "tuning.container.probe"}
    _, extra = launch.command(gpu, [])
    assert extra["NCCL_DEBUG"] == "INFO" and extra["NCCL_DEBUG_SUBSYS"] == "INIT,P2P,SHM,NET"
    _, extra = launch.command({**gpu, "NCCL_DEBUG": "WARN"}, [])  # the user's own wins
    assert "NCCL_DEBUG" not in extra and extra["NCCL_DEBUG_SUBSYS"] == "INIT,P2P,SHM,NET"
    for env in ({"HARNESS_DEVICE": "gpu"}, {**gpu, "HARNESS_DEVICE": "cpu"}):
        _, extra = launch.command(env, [])
        assert "NCCL_DEBUG" not in extra and "NCCL_DEBUG_SUBSYS" not in extra, env


# --- what the guard says ---------------------------------------------------------------------


def test_driver_version_from_the_drivers_proc_file(tmp_path):
    # stands in for /proc/driver/nvidia/version of the proprietary and the open kernel module
    closed = tmp_path / "closed"
    closed.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 "
        "19:39:15 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    opened = tmp_path / "open"
    opened.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  "
        "Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Jul 15 2025\n"
    )
    assert gpu_guard.driver_version(str(closed)) == "535.183.01"
    assert gpu_guard.driver_version(str(opened)) == "580.65.06"
    assert gpu_guard.driver_version(str(tmp_path / "missing")) is None
    message = gpu_guard.problem({"HARNESS_DEVICE": "gpu"}, str(closed))
    assert "driver: 535.183.01;" in message and FOUND[0] in message


def test_the_fix_follows_what_was_found():
    old = gpu_guard.fix("13.0", "535.183.01", 0, 1)
    assert old.startswith(
        "driver 535.183.01 is too old: torch's CUDA 13.0 needs an NVIDIA "
        "driver >= 580 (CUDA 13 images: >= 580; the CUDA 12.8 image: "
        ">= 525.60.13)"
    )
    assert "driver" not in gpu_guard.fix("12.8", "550.54.15", 2, 4).split(":")[0]
    assert gpu_guard.fix("12.8", "550.54.15", 2, 4).startswith(
        "4 ranks on this node but 2 GPU(s) visible: run at most one rank per GPU (GPUS=2"
    )
    assert gpu_guard.fix("12.8", "470.256.02", 0, 1).startswith("driver 470.256.02 is too old")
    assert gpu_guard.fix("13.0", None, 0, 1).startswith("no driver reaches this container")
    assert gpu_guard.fix(None, None, 0, 1) == (
        "this torch is a CPU build: run the GPU image, or run CPU ranks (GPUS=0)"
    )
    assert gpu_guard.problem({"HARNESS_DEVICE": "cpu"}) is None
    assert gpu_guard.problem({}) is None


# --- real processes: no silent CPU -----------------------------------------------------------


def assert_names_what_it_found(text: str) -> None:
    for part in FOUND:
        assert part in text, text[-3000:]
    if not DRIVER_FILE.exists():
        assert NO_DRIVER in text, text[-3000:]


def trainer(model: Path, data: Path, out: Path, device: str) -> subprocess.CompletedProcess:
    args = [
        "--model_name_or_path",
        str(model),
        "--training_data_path",
        str(data),
        "--output_dir",
        str(out),
        "--max_steps",
        "2",
        "--max_seq_length",
        "32",
        "--per_device_train_batch_size",
        "2",
        "--save_strategy",
        "no",
    ]
    return subprocess.run(
        [sys.executable, "-m", "tuning.sft_trainer", *args],
        cwd=ROOT,
        env=launch_env(HARNESS_DEVICE=device),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_trainer_told_gpu_without_cuda_fails_before_step_one(tiny_model, demo_data, tmp_path):
    out = tmp_path / "out"
    proc = trainer(tiny_model, demo_data, out, "gpu")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "sft_trainer: error: HARNESS_DEVICE=gpu but this rank cannot use a GPU" in proc.stderr
    assert_names_what_it_found(proc.stderr)
    records = read_metrics(out, 0)
    assert [r["event"] for r in records] == ["phase", "end"]  # imports, then the end: no step
    assert records[-1]["status"] == "failed" and FOUND[0] in records[-1]["error"]
    assert not (out / "train_summary.json").exists()


def test_trainer_on_cpu_still_trains(tiny_model, demo_data, tmp_path):
    proc = trainer(tiny_model, demo_data, tmp_path / "out", "cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "out/train_summary.json").read_text())["status"] == "completed"


def test_probe_told_gpu_without_cuda_fails_and_writes_nothing(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HARNESS_DEVICE": "gpu",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    cmd = [sys.executable, "-m", "tuning.container.probe", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "probe: HARNESS_DEVICE=gpu but this rank cannot use a GPU" in proc.stderr
    assert_names_what_it_found(proc.stderr)
    assert not (tmp_path / "probe.json").exists()


def test_foreign_trainer_told_gpu_without_cuda_never_starts(mounted, tmp_path):
    marker, env = mounted
    proc = recorder(env, "gpu")
    assert proc.returncode == 1 and not marker.exists()
    assert "harness_rank: HARNESS_DEVICE=gpu but this rank cannot use a GPU" in proc.stderr
    assert_names_what_it_found(proc.stderr)
    end = read_metrics(tmp_path / "out", 0)[-1]
    assert end["event"] == "end" and end["status"] == "failed" and end["exit_code"] == 1
    assert_names_what_it_found(end["error"])
    # the run's summary says why, in the rank's own words
    status, why = status_of({"rank0": 1}, {0: read_metrics(tmp_path / "out", 0)})
    assert status == "failed" and why.startswith("rank(s) 0 ended failed: HARNESS_DEVICE=gpu")


def test_foreign_trainer_on_cpu_runs(mounted, tmp_path):
    marker, env = mounted
    proc = recorder(env, "cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert marker.read_text() == "ran"
    assert read_metrics(tmp_path / "out", 0)[-1]["status"] == "completed"
