"""No silent CPU: a rank told it has GPUs (HARNESS_DEVICE=gpu) that cannot use CUDA fails
before its first step, naming what it found and the fix.

Without this, a GPU image on a driver too old for its CUDA trains on CPU (accelerate falls back
by itself) and reports success. `problem()` names: torch.cuda.is_available(), the CUDA devices
against the ranks on this node (LOCAL_WORLD_SIZE: each rank needs its own), the driver
(/proc/driver/nvidia/version), and torch's CUDA build (None: a CPU build of torch).

Standalone on purpose (standard library at import, torch inside `problem()`): our trainer and
probe import it, and the harness mounts it beside the rank recorder into a user's image, so a
foreign trainer (fms-hf-tuning) is checked the same way, as fsdp_gloo.py is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

DRIVER_FILE = "/proc/driver/nvidia/version"
# The oldest driver each CUDA major runs on (NVIDIA's CUDA Toolkit release notes, "CUDA Toolkit
# and Corresponding Driver Versions": 13.x needs R580; 12.x runs on >= 525.60.13 through minor
# version compatibility).
DRIVER_FLOOR = {"13": "580", "12": "525.60.13"}


class GpuUnavailable(RuntimeError):
    """HARNESS_DEVICE=gpu, and this rank cannot use a GPU."""


def driver_version(path: str = DRIVER_FILE) -> str | None:
    """The kernel module's version ("580.65.06"), from the driver's /proc file; None without
    one. Its first line reads "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  ..."."""
    try:
        with open(path) as f:
            first = f.readline()
    except OSError:
        return None
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", first)
    return m.group(1) if m else first.strip() or None


def _older(version: str, floor: str) -> bool:
    def parts(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", v))

    return parts(version) < parts(floor)


def fix(cuda_build: str | None, driver: str | None, devices: int, local_ranks: int) -> str:
    """What to do about it, from what was found."""
    cpu = "or run CPU ranks (GPUS=0)"
    if cuda_build is None:
        return f"this torch is a CPU build: run the GPU image, {cpu}"
    floor = DRIVER_FLOOR.get(cuda_build.split(".")[0])
    need = f"torch's CUDA {cuda_build} needs an NVIDIA driver" + (f" >= {floor}" if floor else "")
    if driver is None:
        return (
            f"no driver reaches this container: run it with the NVIDIA runtime (Docker's "
            f"--gpus, Compose's device reservation, a pod's nvidia.com/gpu limit); {need}, "
            f"{cpu}"
        )
    if floor and _older(driver, floor):
        return (
            f"driver {driver} is too old: {need} (CUDA 13 images: >= 580; the CUDA 12.8 "
            f"image: >= 525.60.13); upgrade the driver, use the image for your driver, "
            f"{cpu}"
        )
    if devices < local_ranks:
        return (
            f"{local_ranks} ranks on this node but {devices} GPU(s) visible: run at most "
            f"one rank per GPU (GPUS={devices}, or PET_NPROC_PER_NODE), {cpu}"
        )
    return f"check CUDA_VISIBLE_DEVICES and the GPUs' state (nvidia-smi), {cpu}"


def problem(env: Mapping[str, str] = os.environ, driver_file: str = DRIVER_FILE) -> str | None:
    """None when this rank may go on: not told it has GPUs, or CUDA works with a device for
    every rank on this node. Else what was found and the fix, in one message."""
    if env.get("HARNESS_DEVICE", "").lower() != "gpu":
        return None
    import torch

    available = torch.cuda.is_available()
    devices = torch.cuda.device_count()
    local = int(env.get("LOCAL_WORLD_SIZE") or 1)
    if available and devices >= local:
        return None
    driver = driver_version(driver_file)
    build = torch.version.cuda
    return (
        f"HARNESS_DEVICE=gpu but this rank cannot use a GPU: CUDA available: {available}; "
        f"CUDA devices: {devices} for {local} rank(s) on this node (LOCAL_WORLD_SIZE); driver: "
        + (driver or f"no NVIDIA driver ({driver_file} missing)")
        + f"; torch {torch.__version__}, its CUDA: {build}"
        + (" (a CPU build of torch)" if build is None else "")
        + f". Fix: {fix(build, driver, devices, local)}"
    )


def check(env: Mapping[str, str] = os.environ) -> None:
    """Raise GpuUnavailable with `problem()`'s message, if there is one."""
    message = problem(env)
    if message:
        raise GpuUnavailable(message)
